"""EntryBytes: one whole archive entry as a body (the ExecuTorch programs an archive carries)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from .reading.entries import EntryFetcher
from .zipfmt import ZipEntry


class EntryBytes:
    """`length`, `read()` and `chunks(start, end)` of one entry; a whole read is CRC-checked."""

    def __init__(self, entry: ZipEntry, fetcher: EntryFetcher) -> None:
        self.entry = entry
        self.length = entry.size
        self._fetcher = fetcher

    async def read(self) -> bytes:
        return await self._fetcher.read(self.entry)

    def chunks(
        self, start: int = 0, end: int | None = None, chunk_size: int | None = None
    ) -> AsyncIterator[bytes | memoryview]:
        return self._fetcher.chunks(self.entry, start, end, chunk_size)
