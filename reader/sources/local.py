"""Local files: aiofiles opens the file, positionless pread runs in aiofiles' executor.

pread (not seek+read) lets many concurrent reads share one descriptor safely.
Streams keep one read in flight ahead of the consumer so the thread hop and
the consumer's work overlap.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import aiofiles
import aiofiles.os

from ..errors import SourceChanged, SourceError
from .base import DEFAULT_CHUNK_SIZE, SourceStats, check_range

_pread = aiofiles.os.wrap(os.pread)
_fstat = aiofiles.os.wrap(os.fstat)


def _identity(stat: os.stat_result) -> str:
    return f"{stat.st_size:x}-{stat.st_mtime_ns:x}-{stat.st_ino:x}"


class LocalFileSource:
    """One local file, opened once; exact reads or a typed error."""

    def __init__(self, path: str, handle: object, stat: os.stat_result) -> None:
        self.location = path
        self._handle = handle
        self._fd: int = handle.fileno()  # type: ignore[attr-defined]
        self.size = stat.st_size
        self.identity = _identity(stat)
        self.stats = SourceStats()

    @classmethod
    async def open(cls, path: str | os.PathLike[str]) -> LocalFileSource:
        path = os.fspath(path)
        try:
            handle = await aiofiles.open(path, "rb")
        except OSError as exc:
            raise SourceError(f"cannot open {path}: {exc.strerror or exc}") from None
        try:
            stat = await _fstat(handle.fileno())
        except OSError as exc:
            await handle.close()
            raise SourceError(f"cannot stat {path}: {exc.strerror or exc}") from None
        if not os.path.isfile(path):
            await handle.close()
            raise SourceError(f"{path} is not a regular file")
        return cls(path, handle, stat)

    async def read(self, start: int, end: int, *, purpose: str = "data") -> bytes:
        check_range(self, start, end)
        data = await self._pread(start, end - start)
        self.stats.record(purpose, len(data))
        return data

    async def stream(
        self, start: int, end: int, *, chunk_size: int = DEFAULT_CHUNK_SIZE, purpose: str = "data"
    ) -> AsyncIterator[bytes]:
        check_range(self, start, end)
        if chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        position = start
        ahead: asyncio.Task[bytes] | None = None
        try:
            while position < end:
                length = min(chunk_size, end - position)
                current = ahead or asyncio.ensure_future(self._pread(position, length))
                position += length
                ahead = None
                if position < end:
                    ahead = asyncio.ensure_future(self._pread(position, min(chunk_size, end - position)))
                data = await current
                self.stats.record(purpose, len(data))
                yield data
        finally:
            if ahead is not None:
                ahead.cancel()

    async def _pread(self, start: int, length: int) -> bytes:
        try:
            data = await _pread(self._fd, length, start)
        except OSError as exc:
            raise SourceError(f"reading {self.location} at {start}: {exc.strerror or exc}") from None
        if len(data) != length:
            await self._raise_short_read(start, length, len(data))
        return data

    async def _raise_short_read(self, start: int, wanted: int, got: int) -> None:
        try:
            now = _identity(await _fstat(self._fd))
        except OSError:
            now = None
        if now != self.identity:
            raise SourceChanged(f"{self.location} changed while being read (was {self.identity}, now {now})")
        raise SourceError(f"short read from {self.location}: {got} of {wanted} bytes at {start}")

    async def close(self) -> None:
        await self._handle.close()  # type: ignore[attr-defined]
