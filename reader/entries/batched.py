"""Several ranges of entries read at once: close ones in one request, local headers included.

An entry whose data offset is unknown and whose ranges lie further in than HEADER_PIGGYBACK_LIMIT
is predicted (fetcher.py's docstring): its header and its ranges at the predicted offset are among
the groups, and the ranges the header does not confirm are read again. One that is not predicted
gets its header read first, so the bytes before its ranges are not read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from .. import zipfmt
from ..sources import ByteSource
from ..zipfmt import ZipEntry
from .offsets import DataOffsets, header_span
from .ranges import check_range, coalesce, containing, verify_whole

# A range starting this far into an entry gets its header resolved separately
# rather than dragging the bytes in between along.
HEADER_PIGGYBACK_LIMIT = 64 << 10


class EntryFetcher(Protocol):
    """What these reads need of fetcher.py's EntryFetcher (which reads through them)."""

    source: ByteSource
    offsets: DataOffsets

    async def read(self, entry: ZipEntry, start: int = 0, end: int | None = None) -> bytes: ...
    async def data_offset(self, entry: ZipEntry) -> int: ...
    async def settle(self, entry: ZipEntry, header: bytes | memoryview | None) -> bool: ...
    def predicts(self, entry: ZipEntry, nbytes: int) -> int | None: ...


class _Stored(NamedTuple):
    """Content bytes [start, end) of a stored entry, the `index`-th range asked for."""

    index: int
    entry: ZipEntry
    start: int
    end: int


async def read_many(fetcher: EntryFetcher, ranges: Sequence[tuple[ZipEntry, int, int]]) -> list[bytes]:
    """Content bytes of several (entry, start, end) ranges at once: stored ranges lying close together
    in the archive in one request per coalesced group (fetched in parallel), each CRC-checked where
    it is its whole entry; DEFLATE ones through `fetcher.read`."""
    results: list[bytes] = [b""] * len(ranges)
    stored: list[_Stored] = []
    for index, (entry, start, end) in enumerate(ranges):
        check_range(entry, start, end)
        if start == end:
            continue
        if entry.method != zipfmt.structs.METHOD_STORED:
            results[index] = await fetcher.read(entry, start, end)
            continue
        zipfmt.check_decodable(entry)
        stored.append(_Stored(index, entry, start, end))
    offsets = fetcher.offsets
    predicted = await _plan_offsets(fetcher, stored)
    regions: list[tuple[int, int]] = []
    for item in stored:
        at = offsets.known(item.entry.name)
        if at is None:
            at = predicted.get(item.entry.name)
        if at is not None:
            regions.append((at + item.start, at + item.end))
        else:  # from the local header on, near the entry's start
            first = item.entry.header_offset
            end = min(first + zipfmt.local_header_guess(item.entry) + item.end, item.entry.region_end)
            regions.append((first, end))
    guessed = list({item.entry.name: item.entry for item in stored if item.entry.name in predicted}.values())
    headers = [header_span(entry) for entry in guessed]
    groups = coalesce(regions + headers)
    fetched = await asyncio.gather(*(fetcher.source.read(low, high) for low, high in groups))
    for entry in guessed:
        await fetcher.settle(entry, _cut(groups, fetched, *header_span(entry), partial=True))
    again: list[_Stored] = []
    for item, (low, high) in zip(stored, regions, strict=True):
        known = offsets.known(item.entry.name)
        if known is None:
            group = containing(groups, low)
            window = memoryview(fetched[group])[low - groups[group][0] : high - groups[group][0]]
            data = _slice_from(fetcher, item, window, low)
        else:
            data = _cut(groups, fetched, known + item.start, known + item.end)
        if data is None:
            again.append(item)  # a longer header, or a wrong prediction
            continue
        verify_whole(item.entry, item.start, item.end, data)
        results[item.index] = bytes(data)
    reread = await asyncio.gather(*(fetcher.read(item.entry, item.start, item.end) for item in again))
    for item, data in zip(again, reread, strict=True):
        results[item.index] = data  # `read` checks its own CRC
    return results


async def _plan_offsets(fetcher: EntryFetcher, stored: Sequence[_Stored]) -> dict[str, int]:
    """The predicted data offsets of the entries read at once (their headers come alongside);
    entries with ranges beyond HEADER_PIGGYBACK_LIMIT that are not predicted get their header
    read first (all at once), so the bytes before their ranges are not read."""
    far: dict[str, tuple[ZipEntry, int]] = {}
    for item in stored:
        if item.entry.name not in fetcher.offsets and item.start > HEADER_PIGGYBACK_LIMIT:
            _, nbytes = far.get(item.entry.name, (item.entry, 0))
            far[item.entry.name] = (item.entry, nbytes + item.end - item.start)
    predicted: dict[str, int] = {}
    for name, (entry, nbytes) in far.items():
        guess = fetcher.predicts(entry, nbytes)
        if guess is not None:
            predicted[name] = guess
    first = [entry for name, (entry, _) in far.items() if name not in predicted]
    await asyncio.gather(*(fetcher.data_offset(entry) for entry in first))
    return predicted


def _slice_from(fetcher: EntryFetcher, item: _Stored, window: memoryview, at: int) -> bytes | None:
    """The item's bytes out of archive bytes starting at `at`, its local header among them; None if
    the window is short (a local header longer than guessed)."""
    found = zipfmt.locate_data(item.entry, window, item.end)
    if isinstance(found, zipfmt.NeedUntil):
        return None
    fetcher.offsets.confirm(item.entry.name, found)
    return bytes(window[found - at + item.start : found - at + item.end])


def _cut(
    groups: Sequence[tuple[int, int]], fetched: Sequence[bytes], low: int, high: int, partial: bool = False
) -> memoryview | None:
    """Archive bytes [low, high) out of the fetched groups; None unless one group holds them (with
    `partial`, what one group holds from `low` on, up to `high`)."""
    group = containing(groups, low)
    if group < 0 or groups[group][1] <= low or (groups[group][1] < high and not partial):
        return None
    base = groups[group][0]
    return memoryview(fetched[group])[low - base : min(high, groups[group][1]) - base]
