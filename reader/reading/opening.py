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

from .. import zipfmt
from ..errors import ArchiveFormatError
from ..pt2.index import MAX_CONFIG_BYTES, build_index, plan_index
from ..pt2.tensorinfo import TensorInfo
from ..sources import ByteSource
from ..sources.held import HeldBytes
from ..zipfmt import ZipEntry
from .ranges import coalesce

MAX_LOCAL_EXTRA = 0xFFFF


@dataclass(frozen=True)
class OpenedIndex:
    root: str
    entries: dict[str, ZipEntry]
    index: dict[str, dict[str, TensorInfo]]
    data_offsets: dict[str, int]  # of the metadata entries read while opening


async def read_index(source: ByteSource, tail_size: int) -> OpenedIndex:
    held, entries = await _read_directory(source, tail_size)
    if not entries:
        raise ArchiveFormatError("not a PT2 archive: the ZIP archive is empty")
    by_name = {entry.name: entry for entry in entries}
    plan = plan_index(by_name, entries[0].name)
    contents, offsets = await _fetch_metadata(source, held, [by_name[name] for name in plan.needed])
    index = build_index(plan, by_name, contents)
    return OpenedIndex(root=plan.root, entries=by_name, index=index, data_offsets=offsets)


async def _read_directory(source: ByteSource, tail_size: int) -> tuple[HeldBytes, tuple[ZipEntry, ...]]:
    size = source.size
    start = max(0, size - max(tail_size, zipfmt.structs.END_RECORD.size))
    held = HeldBytes(start, await source.read(start, size, purpose="open"))
    while True:
        found = zipfmt.locate_directory(held.data, held.start, size)
        if isinstance(found, zipfmt.DirectorySpan):
            break
        held = await _extend(source, held, found.start)
    if found.offset < held.start:
        held = await _extend(source, held, found.offset)
    directory = memoryview(held.data)[found.offset - held.start : found.end - held.start]
    return held, zipfmt.parse_central_directory(directory, found)


async def _extend(source: ByteSource, held: HeldBytes, start: int) -> HeldBytes:
    if start >= held.start:
        raise ArchiveFormatError(f"ZIP end records point back into themselves (at {start})")
    return HeldBytes(start, await source.read(start, held.start, purpose="open") + held.data)


def _entry_region(entry: ZipEntry) -> tuple[int, int]:
    """The bytes that surely hold an entry's local header and data."""
    longest = zipfmt.local_header_guess(entry) + MAX_LOCAL_EXTRA + entry.compressed_size
    return entry.header_offset, min(entry.region_end, entry.header_offset + longest)


async def _fetch_metadata(
    source: ByteSource, held: HeldBytes, entries: list[ZipEntry]
) -> tuple[dict[str, bytes], dict[str, int]]:
    """Each entry's content, and where its data starts."""
    for entry in entries:
        if entry.size > MAX_CONFIG_BYTES:
            raise ArchiveFormatError(
                f"metadata entry {entry.name!r} claims {entry.size} bytes; refusing to parse"
            )
        zipfmt.check_decodable(entry)
    regions = {entry.name: _entry_region(entry) for entry in entries}
    missing = coalesce([region for region in regions.values() if not held.covers(*region)])
    fetched = await asyncio.gather(*(source.read(start, end, purpose="open") for start, end in missing))
    runs = [held, *(HeldBytes(start, data) for (start, _), data in zip(missing, fetched))]
    contents, offsets = {}, {}
    for entry in entries:
        run = next(run for run in runs if run.covers(*regions[entry.name]))
        offset = zipfmt.locate_data(entry, run.slice(*regions[entry.name]), entry.compressed_size)
        if isinstance(offset, zipfmt.NeedUntil):  # the region holds the longest possible header
            raise ArchiveFormatError(f"local header of {entry.name!r} runs past its data")
        stored = run.slice(offset, offset + entry.compressed_size)
        decoder = zipfmt.EntryDecoder(entry)
        contents[entry.name] = b"".join(decoder.feed(stored))
        decoder.finish()
        offsets[entry.name] = offset
    return contents, offsets
