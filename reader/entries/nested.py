"""ZIP archives stored inside a ZIP entry (AOTInductor's pickle_weights files), read by range.

Each `data/weights/weight_N` of a pickle_weights package is a whole torch.save ZIP stored
(uncompressed) in the outer archive. Its directory is parsed from two ranges of the outer
file, the entry's start (outer local header, and usually the nested data.pkl) and its end
(the nested end records and central directory), fetched for every weight file at once and
coalesced. The nested entries are then re-addressed in outer-archive offsets, so the nested
storage is an ordinary ZipEntry to the rest of the reader: named `<outer>!/<inner>`, with its
own local header, CRC and range reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .. import zipfmt
from ..errors import ArchiveFormatError, UnsupportedPayload
from ..pt2.aoti import NESTED_SEPARATOR
from ..sources import ByteSource
from ..sources.base import BytesAt
from ..zipfmt import ZipEntry
from .parsing import ParseBudget
from .ranges import coalesce

# torch.save puts data.pkl first, so a small head usually holds it; its end records and
# central directory (a handful of entries) fit in the tail.
NESTED_HEAD = 8 << 10
NESTED_TAIL = 4 << 10


@dataclass(frozen=True, slots=True)
class NestedZip:
    """A ZIP inside a stored outer entry; `entries` are in outer-archive offsets."""

    outer: ZipEntry
    base: int  # outer offset of the nested archive's first byte
    entries: dict[str, ZipEntry]  # by nested name


def nested_name(outer: ZipEntry, inner: str) -> str:
    return f"{outer.name}{NESTED_SEPARATOR}{inner}"


def _head_region(entry: ZipEntry) -> tuple[int, int]:
    end = entry.header_offset + zipfmt.local_header_guess(entry) + NESTED_HEAD
    return entry.header_offset, min(entry.region_end, end)


def _tail_region(entry: ZipEntry) -> tuple[int, int]:
    return max(entry.header_offset, entry.region_end - NESTED_TAIL - 64), entry.region_end


async def read_nested_zips(
    source: ByteSource, runs: list[BytesAt], outers: Sequence[ZipEntry], budget: ParseBudget
) -> tuple[list[NestedZip], list[BytesAt]]:
    """Parse the ZIP inside each outer entry (each directory a step of the open's `budget`); returns
    them and every run of bytes now held."""
    for outer in outers:
        if outer.method != zipfmt.structs.METHOD_STORED:
            raise UnsupportedPayload(
                f"{outer.name!r} is {outer.compression}-compressed; a nested torch.save archive can only "
                "be read by range when stored"
            )
    runs = runs + await _fetch_missing(
        source, runs, [region for outer in outers for region in (_head_region(outer), _tail_region(outer))]
    )
    nested = []
    for outer in outers:
        base = await _data_offset(source, runs, outer)
        nested.append(await _parse_nested(source, runs, outer, base, budget))
    return nested, runs


async def _fetch_missing(
    source: ByteSource, runs: list[BytesAt], regions: Iterable[tuple[int, int]]
) -> list[BytesAt]:
    missing = coalesce([region for region in regions if not any(run.covers(*region) for run in runs)])
    fetched = await asyncio.gather(*(source.read(start, end, purpose="open") for start, end in missing))
    return [BytesAt(start, data) for (start, _), data in zip(missing, fetched)]


async def held_slice(source: ByteSource, runs: list[BytesAt], start: int, end: int) -> memoryview:
    """Bytes [start, end) from the runs held, reading them (and keeping them) if none covers."""
    for run in runs:
        if run.covers(start, end):
            return run.slice(start, end)
    run = BytesAt(start, await source.read(start, end, purpose="open"))
    runs.append(run)
    return run.slice(start, end)


async def _data_offset(source: ByteSource, runs: list[BytesAt], outer: ZipEntry) -> int:
    start, end = _head_region(outer)
    found = zipfmt.locate_data(outer, await held_slice(source, runs, start, end))
    if isinstance(found, zipfmt.NeedUntil):
        found = zipfmt.locate_data(outer, await held_slice(source, runs, start, found.end))
        if isinstance(found, zipfmt.NeedUntil):
            raise ArchiveFormatError(f"local header of {outer.name!r} runs past its data")
    return found


async def _parse_nested(
    source: ByteSource, runs: list[BytesAt], outer: ZipEntry, base: int, budget: ParseBudget
) -> NestedZip:
    size = outer.size
    where = f"nested archive {outer.name!r}"
    tail_start = max(0, size - NESTED_TAIL)
    try:
        while True:
            tail = await held_slice(source, runs, base + tail_start, base + size)
            found = zipfmt.locate_directory(bytes(tail), tail_start, size)
            if isinstance(found, zipfmt.DirectorySpan):
                break
            if found.start >= tail_start:
                raise ArchiveFormatError("end records point back into themselves")
            tail_start = found.start
        directory = await held_slice(source, runs, base + found.offset, base + found.end)
        span = found
        inner = await budget.run(lambda _deadline: zipfmt.parse_central_directory(directory, span))
    except ArchiveFormatError as exc:
        raise ArchiveFormatError(f"{where}: {exc}") from None
    entries = {
        entry.name: entry._replace(
            name=nested_name(outer, entry.name),
            header_offset=base + entry.header_offset,
            region_end=base + entry.region_end,
        )
        for entry in inner
    }
    return NestedZip(outer, base, entries)
