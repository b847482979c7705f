"""Bytes already in memory as a source: for archives held in RAM, and for fuzzing the parser."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

from .base import DEFAULT_CHUNK_SIZE, ByteSource, Checked, Landed, SourceStats, check_range


class BytesSource(ByteSource):
    """An immutable bytes object behind the source interface (standing in for a remote one)."""

    def __init__(self, data: bytes, location: str = "<memory>") -> None:
        self._data = bytes(data)
        self.location = location
        self.size = len(self._data)
        self.identity = hashlib.blake2b(self._data, digest_size=12).hexdigest()
        self.stats = SourceStats()

    async def read(self, start: int, end: int, *, purpose: str = "data") -> bytes:
        check_range(self, start, end)
        self.stats.record(purpose, end - start)
        return self._data[start:end]

    async def read_into(
        self, start: int, buffer: memoryview, *, purpose: str = "data", landed: Landed | None = None
    ) -> None:
        end = start + len(buffer)
        check_range(self, start, end)
        buffer[:] = memoryview(self._data)[start:end]
        self.stats.record(purpose, end - start)

    async def stream(
        self,
        start: int,
        end: int,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        purpose: str = "data",
        checked: Checked | None = None,
    ) -> AsyncIterator[bytes]:
        check_range(self, start, end)
        for position in range(start, end, chunk_size):
            chunk = self._data[position : min(end, position + chunk_size)]
            self.stats.record(purpose, len(chunk))
            yield chunk

    async def close(self) -> None:
        return None

    async def revalidate(self) -> bool:
        return True
