"""Local files: aiofiles for opening and for reads that must wait on the disk.

A thread hop costs 50-200 us here, more than copying a MiB out of the page
cache, so each read first tries `preadv(..., RWF_NOWAIT)` on the event loop:
the kernel serves it only from the page cache and never blocks. Whatever it
could not serve goes to aiofiles' executor. Reads are positionless (pread),
so concurrent reads share one descriptor safely.
"""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator

import aiofiles
import aiofiles.os
import numpy as np

from ..errors import SourceChanged, SourceError
from .base import DEFAULT_CHUNK_SIZE, SourceStats, check_range

_preadv = aiofiles.os.wrap(os.preadv)
_pread = aiofiles.os.wrap(os.pread)
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", None)


# read() copies small reads out of the buffer preadv filled; bigger ones come back from
# pread as bytes directly: copying a fresh buffer over 128 KiB costs page faults (about
# 1 ms per MiB here), far more than the thread hop.
INLINE_COPY_LIMIT = 64 << 10


def _identity(status: os.stat_result) -> str:
    return f"{status.st_size:x}-{status.st_mtime_ns:x}-{status.st_ino:x}"


class LocalFileSource:
    """One local file, opened once; exact reads or a typed error."""

    def __init__(self, path: str, handle: object, status: os.stat_result) -> None:
        self.location = path
        self._handle = handle
        self._fd: int = handle.fileno()  # type: ignore[attr-defined]
        self.size = status.st_size
        self.identity = _identity(status)
        self.stats = SourceStats()
        self._nowait = _RWF_NOWAIT is not None

    @classmethod
    async def open(cls, path: str | os.PathLike[str]) -> LocalFileSource:
        path = os.fspath(path)
        try:
            handle = await aiofiles.open(path, "rb")
        except OSError as exc:
            raise SourceError(f"cannot open {path}: {exc.strerror or exc}") from None
        status = os.fstat(handle.fileno())
        if not stat.S_ISREG(status.st_mode):
            await handle.close()
            raise SourceError(f"{path} is not a regular file")
        return cls(path, handle, status)

    async def read(self, start: int, end: int, *, purpose: str = "data") -> bytes:
        check_range(self, start, end)
        if end - start <= INLINE_COPY_LIMIT:
            data = bytes(await self._read_into(start, end - start))
        else:
            data = await self._pread(start, end - start)
        self.stats.record(purpose, len(data))
        return data

    async def stream(
        self, start: int, end: int, *, chunk_size: int = DEFAULT_CHUNK_SIZE, purpose: str = "data"
    ) -> AsyncIterator[memoryview]:
        check_range(self, start, end)
        if chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        for position in range(start, end, chunk_size):
            chunk = await self._read_into(position, min(chunk_size, end - position))
            self.stats.record(purpose, len(chunk))
            yield chunk

    async def _read_into(self, start: int, length: int) -> memoryview:
        """Exactly `length` bytes at `start`, from the page cache inline when possible."""
        buffer = np.empty(length, dtype=np.uint8)  # uninitialised: the read fills it
        view = memoryview(buffer).cast("B")
        done = self._read_cached(view, start) if length else 0
        try:
            while done < length:
                got = await _preadv(self._fd, [view[done:]], start + done)
                if got == 0:
                    await self._raise_short_read(start, length, done)
                done += got
        except OSError as exc:
            raise SourceError(f"reading {self.location} at {start}: {exc.strerror or exc}") from None
        return view

    async def _pread(self, start: int, length: int) -> bytes:
        try:
            data = await _pread(self._fd, length, start)
        except OSError as exc:
            raise SourceError(f"reading {self.location} at {start}: {exc.strerror or exc}") from None
        if len(data) != length:
            await self._raise_short_read(start, length, len(data))
        return data

    def _read_cached(self, view: memoryview, start: int) -> int:
        if not self._nowait:
            return 0
        try:
            return os.preadv(self._fd, [view], start, _RWF_NOWAIT)
        except BlockingIOError:
            return 0
        except OSError:  # the filesystem does not support RWF_NOWAIT: always use the executor
            self._nowait = False
            return 0

    async def _raise_short_read(self, start: int, wanted: int, got: int) -> None:
        try:
            now = _identity(os.fstat(self._fd))
        except OSError:
            now = None
        if now != self.identity:
            raise SourceChanged(f"{self.location} changed while being read (was {self.identity}, now {now})")
        raise SourceError(f"short read from {self.location}: {got} of {wanted} bytes at {start}")

    async def revalidate(self) -> bool:
        """True if the file is still the one opened (same size, mtime and inode)."""
        try:
            return _identity(os.stat(self.location)) == self.identity
        except OSError:
            return False

    async def close(self) -> None:
        await self._handle.close()  # type: ignore[attr-defined]
