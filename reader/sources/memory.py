"""Bytes already in memory as a source: for archives held in RAM, and for fuzzing the parser."""

from __future__ import annotations

import hashlib

from .base import ByteSource, Landed, SourceStats, check_range


class BytesSource(ByteSource):
    """An immutable bytes object behind the source interface (standing in for a remote one); it
    streams as every source does by default, one `read` a chunk."""

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

    async def close(self) -> None:
        return None

    async def revalidate(self) -> bool:
        return True
