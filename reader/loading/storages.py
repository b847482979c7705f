"""The bytes of a load plan's storages: one NumPy uint8 buffer per payload entry.

- A local archive is memory-mapped (copy-on-write): a stored entry's buffer is a view of the
  mapping, so nothing is read until the bytes are touched. `copy=True` copies them into owned
  buffers (and checks each CRC-32 on the way); DEFLATE entries are always inflated.
- Any other source (HTTP, S3, ...) receives each of the plan's ranges straight into one buffer of
  its size (`source.read_into`: parallel parts over several connections where they pay, each
  retried and resumed into its own slice, pinned to the object's version); the stored entries'
  storages are views of it at their data offsets (the local headers between them stay in it; a
  range is split where more than COALESCE_GAP lies between two entries),
  each checked against its CRC-32 on a thread as soon as its bytes are in (landing.py: remote
  sources say what landed). Nothing is copied, and the one big
  buffer gets huge pages (NumPy advises them for big allocations), where a buffer per storage
  cost a copy and a page fault per 4 KiB; its pages are faulted in on a thread meanwhile
  (prefault.py). Memory: the output plus the local headers between
  entries (and a DEFLATE entry's compressed bytes until it is inflated).

`verify=None` checks every CRC-32 of what is read (everything, remotely); memory-mapped views
are not read, so they are checked only with `verify=True`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence

import numpy as np

from .. import zipfmt
from ..cache.source import full_check_passed, needs_full_check
from ..entries.fetcher import EntryFetcher
from ..entries.offsets import DataOffsets
from ..errors import IntegrityError
from ..sources import ByteSource
from ..sources.spans import COALESCE_GAP
from ..tasks import task_group
from ..zipfmt import ZipEntry
from ..zipfmt.structs import METHOD_STORED
from .budget import Ledger
from .landing import Arrivals, Follower
from .plan import LoadPlan, ReadRange, group_ranges, set_apart, split_within
from .prefault import prefaulting

Buffers = dict[str, np.ndarray]
Landed = Callable[[Buffers], None]  # hears of storages as they are in and checked
# Ranges at most this big are read several at a time (each is a round trip more than bytes);
# bigger ones are read one after the other, each as parallel parts (the parts bound the memory).
SMALL_RANGE = 16 << 20
SMALL_RANGES_AT_ONCE = 8
ALIGNMENT = 64
# A range received in place keeps what lies between its entries (local headers; entries not selected)
# as long as the storages live: at most COALESCE_GAP per gap. A whole model's gaps are its local headers.
# Storages handed over as they land (iter_load): one bigger than this is a range of its own, read
# after the smaller ranges, so that GPT-2's 154 MB embedding (the archive's first third) does not
# hold back the tensors behind it. One more request; the same bytes and checks.
APART = 32 << 20
# Within a memory budget (a streaming read), a range takes at most this share of it, so that several
# are in flight while the consumer holds others; ranges this small or bigger run this many at once.
BUDGET_SHARE = 4
BUDGETED_BIG_AT_ONCE = 2


async def read_storages(
    source: ByteSource,
    fetcher: EntryFetcher,
    plan: LoadPlan,
    *,
    copy: bool = False,
    verify: bool | None = None,
    landed: Landed | None = None,
    ledger: Ledger | None = None,
) -> Buffers:
    """Every storage of `plan` by entry name; zero payloads are zeros of the views' extent.
    `landed` (when given) hears of each batch of storages as soon as they are in and checked.
    With a `ledger` (a streaming read, remote), each range takes its bytes from the budget before it
    is read and the storages are handed to `landed` only, not kept: what is returned holds the
    zero payloads alone."""
    heard = landed or _ignore
    buffers: Buffers = {
        name: np.zeros(storage.nbytes, dtype=np.uint8)
        for name, storage in plan.storages.items()
        if storage.zeros
    }
    heard(dict(buffers))  # a dict of its own: `buffers` grows on
    if source.mappable:
        await source.fill((rng.start, rng.end) for rng in plan.ranges)  # a cache fetches what it lacks first
        if copy or verify or _deflated(plan) or _unchecked(source, plan):  # reads every byte: on a thread
            mapped = await asyncio.to_thread(_mapped, source, fetcher, plan, copy, verify)
        else:  # a mapping and views of it: microseconds, where a thread hop cost a millisecond
            mapped = _mapped(source, fetcher, plan, copy, verify)
        heard(mapped)
        buffers.update(mapped)
    elif ledger is not None:
        await _streamed(source, fetcher, plan, heard, ledger)
    else:
        buffers.update(await _received(source, fetcher, plan, heard, apart=landed is not None))
    return buffers


def _ignore(buffers: Buffers) -> None:
    pass


def _apart(rng: ReadRange) -> bool:
    return rng.entries[0].size > APART  # set apart: read last (a stable sort keeps the rest's order)


# -- local: memory-mapped --------------------------------------------------------------------


def _mapped(
    source: ByteSource,
    fetcher: EntryFetcher,
    plan: LoadPlan,
    copy: bool,
    verify: bool | None,
) -> Buffers:
    """Views of the mapped file. A cache's entries are CRC-checked in full the first time they are
    mapped (their bytes came from afar) and never again for that version."""
    if source.size == 0:
        return {}
    mapping = source.map()
    whole = np.frombuffer(mapping, dtype=np.uint8)
    headers = memoryview(mapping)
    buffers: Buffers = {}
    for rng in plan.ranges:
        for entry in rng.entries:
            start = _data_offset_in(entry, headers, 0, fetcher.offsets)
            stored = whole[start : start + entry.compressed_size]
            if entry.method != METHOD_STORED:
                buffers[entry.name] = _inflate(entry, stored)
                continue
            if copy or verify or needs_full_check(source, entry.name, entry.crc32):
                _check_crc(entry, stored)
                full_check_passed(source, entry.name, entry.crc32)
            buffers[entry.name] = stored.copy() if copy else stored
    return buffers


def _unchecked(source: ByteSource, plan: LoadPlan) -> bool:
    """A cache's entries not yet checked in full: the mapping reads them once."""
    return any(
        needs_full_check(source, entry.name, entry.crc32) for rng in plan.ranges for entry in rng.entries
    )


def _deflated(plan: LoadPlan) -> bool:
    return any(entry.method != METHOD_STORED for rng in plan.ranges for entry in rng.entries)


def _inflate(entry: ZipEntry, stored: np.ndarray) -> np.ndarray:
    out = np.empty(entry.size, dtype=np.uint8)
    view = memoryview(out)
    decoder = zipfmt.EntryDecoder(entry)
    for piece in decoder.feed(memoryview(stored)):
        view[decoder.produced - len(piece) : decoder.produced] = piece
    decoder.finish()
    return out


def _check_crc(entry: ZipEntry, data: np.ndarray) -> None:
    zipfmt.verify_crc(entry, zipfmt.crc32(memoryview(data)))


# -- remote: ranges received in place ---------------------------------------------------------


async def _received(
    source: ByteSource, fetcher: EntryFetcher, plan: LoadPlan, landed: Landed, apart: bool
) -> Buffers:
    # the bytes between a range's entries stay in memory with them: split where more lies between
    ranges = [part for rng in plan.ranges for part in group_ranges(rng.entries, COALESCE_GAP)]
    if apart:  # handed over as they land: a huge storage is read on its own, after the rest
        ranges = sorted((part for rng in ranges for part in set_apart(rng, APART)), key=_apart)
    small = [rng for rng in ranges if rng.size <= SMALL_RANGE]
    big = [rng for rng in ranges if rng.size > SMALL_RANGE]
    gate = asyncio.Semaphore(SMALL_RANGES_AT_ONCE)
    buffers: Buffers = {}

    async def read_small(rng: ReadRange) -> None:
        async with gate:
            buffers.update(await _read_range(source, fetcher, rng, landed))

    async def read_big() -> None:
        for rng in big:
            buffers.update(await _read_range(source, fetcher, rng, landed))

    async with task_group() as group:  # the first failure cancels the rest
        for rng in small:
            group.create_task(read_small(rng))
        group.create_task(read_big())
    return buffers


async def _streamed(
    source: ByteSource, fetcher: EntryFetcher, plan: LoadPlan, landed: Landed, ledger: Ledger
) -> None:
    """The plan's ranges read in archive order, none launched before its bytes fit in the budget;
    each storage goes to `landed` and is not kept here."""
    share = max(1, ledger.budget.capacity // BUDGET_SHARE)
    ranges = [
        piece
        for rng in plan.ranges
        for part in group_ranges(rng.entries, COALESCE_GAP)
        for piece in split_within(part, share)
    ]
    small, big = asyncio.Semaphore(SMALL_RANGES_AT_ONCE), asyncio.Semaphore(BUDGETED_BIG_AT_ONCE)

    async def read(rng: ReadRange, gate: asyncio.Semaphore) -> None:
        try:
            await _read_range(source, fetcher, rng, landed)
        finally:
            gate.release()

    async with task_group() as group:  # the first failure cancels the rest
        for rng in ranges:
            gate = small if rng.size <= SMALL_RANGE else big
            await gate.acquire()
            try:
                await ledger.take(rng.size, [entry.name for entry in rng.entries])
            except BaseException:
                gate.release()
                raise
            group.create_task(read(rng, gate))


async def _read_range(source: ByteSource, fetcher: EntryFetcher, rng: ReadRange, landed: Landed) -> Buffers:
    """The range's bytes received into one buffer; its stored entries are views of it (CRC-checked
    on a thread as they land, where the source says what landed), its DEFLATE entries inflated into
    buffers of their own."""
    whole = aligned_empty(rng.size, rng.start)
    follower = Follower(
        rng.entries,
        Arrivals(rng.start, rng.end),
        functools.partial(_entries_of, whole, rng.start, offsets=fetcher.offsets),
        landed,
    )

    async def receive() -> None:
        async with prefaulting(whole):
            # (a source that does not report what landed leaves it all to `complete`)
            await source.read_into(rng.start, memoryview(whole), landed=follower.landed)
        follower.complete()

    async with task_group() as group:  # a corrupt entry stops the receive at once
        group.create_task(follower.run())
        group.create_task(receive())
    return follower.results


def _entries_of(whole: np.ndarray, base: int, entries: Sequence[ZipEntry], offsets: DataOffsets) -> Buffers:
    """`entries` out of `whole` (archive bytes from `base`): stored ones as views, CRC-checked;
    DEFLATE ones inflated."""
    buffers: Buffers = {}
    headers = memoryview(whole)
    for entry in entries:
        start = _data_offset_in(entry, headers, base, offsets) - base
        stored = whole[start : start + entry.compressed_size]
        if len(stored) != entry.compressed_size:
            raise IntegrityError(f"entry {entry.name!r}: its data runs past the range read")
        if entry.method != METHOD_STORED:
            buffers[entry.name] = _inflate(entry, stored)
            continue
        _check_crc(entry, stored)
        buffers[entry.name] = stored
    return buffers


def _data_offset_in(entry: ZipEntry, held: memoryview, base: int, offsets: DataOffsets) -> int:
    """Where `entry`'s data starts in the archive: known, or from its local header in `held`
    (archive bytes from `base`; checked against the central directory, as every read of the
    reader does)."""
    found = offsets.known(entry.name)
    if found is None:
        region = held[entry.header_offset - base : entry.region_end - base]
        located = zipfmt.locate_data(entry, region)
        if isinstance(located, zipfmt.NeedUntil):
            raise IntegrityError(f"entry {entry.name!r}: its local header runs past the range read")
        found = located
        offsets.confirm(entry.name, found)
    return found


def aligned_empty(size: int, offset: int) -> np.ndarray:
    """An uninitialised buffer of `size` bytes that holds archive bytes from `offset`: placed so that
    archive offsets keep their alignment to 64 in memory (the archive aligns payloads to 64)."""
    spare = np.empty(size + ALIGNMENT, dtype=np.uint8)
    shift = (offset - spare.ctypes.data) % ALIGNMENT
    return spare[shift : shift + size]
