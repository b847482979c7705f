"""EntryBytes: one whole archive entry as a body (the ExecuTorch programs an archive carries)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from .. import zipfmt
from ..entries.fetcher import EntryFetcher
from ..zipfmt import ZipEntry
from .verified import entry_chunks, entry_read


class EntryBytes:
    """`length`, `read()` and `chunks(start, end)` of one entry; a whole read is CRC-checked."""

    def __init__(self, entry: ZipEntry, fetcher: EntryFetcher) -> None:
        self.entry = entry
        self.length = entry.size
        self._fetcher = fetcher

    @property
    def fetcher(self) -> EntryFetcher:
        return self._fetcher

    async def archive_span(self) -> tuple[int, int]:
        """Where the entry's bytes lie in the archive when it is stored (for a sendfile of them);
        ValueError for a DEFLATE entry."""
        if self.entry.method != zipfmt.structs.METHOD_STORED:
            raise ValueError(f"{self.entry.name!r} is compressed: not a run of the archive's bytes")
        offset = await self._fetcher.data_offset(self.entry)
        return offset, offset + self.length

    async def read(self) -> bytes:
        return await entry_read(self._fetcher, self.entry, 0, self.length)

    def chunks(
        self, start: int = 0, end: int | None = None, chunk_size: int | None = None
    ) -> AsyncIterator[bytes | memoryview]:
        end = self.length if end is None else end
        return entry_chunks(self._fetcher, self.entry, start, end, chunk_size or self._fetcher.chunk_size)
