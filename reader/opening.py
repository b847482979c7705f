"""The open policy: how few reads it takes to get from a byte source to a full index.

1. one read of the tail (end records, and usually the whole central directory);
2. at most one more read if the central directory is larger than the tail;
3. the metadata entries (configs, archive_format, ...), each read with its local
   header, adjacent ones coalesced, independent ones in parallel, and served from
   the bytes already held when the tail covered them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from . import zipfmt
from .entries import EntryReader
from .errors import ArchiveFormatError
from .index import MAX_CONFIG_BYTES, build_index, plan_index
from .ranges import coalesce
from .sources import DEFAULT_TAIL_SIZE, ByteSource
from .tensorinfo import TensorInfo
from .zipfmt import ZipEntry

MAX_LOCAL_EXTRA = 0xFFFF


@dataclass(frozen=True)
class OpenedIndex:
    root: str
    entries: dict[str, ZipEntry]
    index: dict[str, dict[str, TensorInfo]]


@dataclass
class _HeldBytes:
    """A contiguous run of archive bytes already read, ending at the archive's end."""

    start: int
    data: bytes

    def covers(self, start: int, end: int) -> bool:
        return self.start <= start and end <= self.start + len(self.data)

    def slice(self, start: int, end: int) -> memoryview:
        """A view, not a copy: configs are sliced twice on their way to the JSON parser."""
        return memoryview(self.data)[start - self.start : end - self.start]


async def read_index(
    source: ByteSource, reader: EntryReader, tail_size: int = DEFAULT_TAIL_SIZE
) -> OpenedIndex:
    held, entries = await _read_directory(source, tail_size)
    if not entries:
        raise ArchiveFormatError("not a PT2 archive: the ZIP archive is empty")
    by_name = {entry.name: entry for entry in entries}
    plan = plan_index(by_name, entries[0].name)
    contents = await _fetch_metadata(source, reader, held, [by_name[name] for name in plan.needed])
    return OpenedIndex(root=plan.root, entries=by_name, index=build_index(plan, by_name, contents))


async def _read_directory(source: ByteSource, tail_size: int) -> tuple[_HeldBytes, tuple[ZipEntry, ...]]:
    size = source.size
    start = max(0, size - max(tail_size, zipfmt.layouts.END_RECORD.size))
    held = _HeldBytes(start, await source.read(start, size, purpose="open"))
    while True:
        found = zipfmt.locate_directory(held.data, held.start, size)
        if isinstance(found, zipfmt.DirectorySpan):
            break
        held = await _extend(source, held, found.start)
    if found.offset < held.start:
        held = await _extend(source, held, found.offset)
    directory = memoryview(held.data)[found.offset - held.start : found.end - held.start]
    return held, zipfmt.parse_central_directory(directory, found)


async def _extend(source: ByteSource, held: _HeldBytes, start: int) -> _HeldBytes:
    if start >= held.start:
        raise ArchiveFormatError(f"ZIP end records point back into themselves (at {start})")
    return _HeldBytes(start, await source.read(start, held.start, purpose="open") + held.data)


def _entry_region(entry: ZipEntry) -> tuple[int, int]:
    """The bytes that surely hold an entry's local header and data."""
    longest = zipfmt.local_header_guess(entry) + MAX_LOCAL_EXTRA + entry.compressed_size
    return entry.header_offset, min(entry.region_end, entry.header_offset + longest)


async def _fetch_metadata(
    source: ByteSource, reader: EntryReader, held: _HeldBytes, entries: list[ZipEntry]
) -> dict[str, bytes]:
    for entry in entries:
        if entry.size > MAX_CONFIG_BYTES:
            raise ArchiveFormatError(
                f"metadata entry {entry.name!r} claims {entry.size} bytes; refusing to parse"
            )
        zipfmt.check_decodable(entry)
    regions = {entry.name: _entry_region(entry) for entry in entries}
    missing = coalesce([region for region in regions.values() if not held.covers(*region)])
    fetched = await asyncio.gather(*(source.read(start, end, purpose="open") for start, end in missing))
    runs = [held, *(_HeldBytes(start, data) for (start, _), data in zip(missing, fetched))]
    contents = {}
    for entry in entries:
        run = next(run for run in runs if run.covers(*regions[entry.name]))
        start, end = regions[entry.name]
        offset = zipfmt.data_offset(entry, run.slice(start, end))
        reader.remember_data_offset(entry, offset)
        stored = run.slice(offset, offset + entry.compressed_size)
        decoder = zipfmt.EntryDecoder(entry)
        contents[entry.name] = b"".join(decoder.feed(stored))
        decoder.finish()
    return contents
