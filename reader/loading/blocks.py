"""A rank's blocks of sharded tensors: only their bytes, as one plan of coalesced, parallel reads.

A block is a slice (`reader.pt2.slicing.plan_slice`: which byte runs of the storage it needs,
and the strided view over those runs laid end to end). Each block gets a buffer of its own
holding its runs laid end to end (or, when the runs hold more than the block, because rows were
joined across small gaps, the block gathered row-major out of them: a rank keeps only its share),
and a `TensorInfo` that views that buffer (its storage entry is the block's key), so the arrays
and torch tensors are built as for whole storages.

The reads: the runs of every block, in archive offsets, sorted and grouped into requests where
less than `REQUEST_GAP` lies between two runs (a gap costs less than a round trip); requests are
received several at a time, each big one in parallel parts by the source. A dim-0 block of a
dense row-major tensor is one run: exactly its bytes are read. Each entry's data offset comes
from its local header (the headers of nearby entries in one request), and a block's requests start
as soon as its header is in; remotely the
small whole tensors (biases, norms: `SMALL_WHOLE`) come in the same requests, since a cut entry's
header lies right after them (GPT-2 at world 4: 105 requests a rank, where apart they were 153).

A block is not its whole entry, so no CRC-32 covers it: its bytes are length-checked and read
from the version opened (SourceChanged otherwise). A cut that spans its whole dim (world size 1,
say) is no block: that tensor is loaded whole, CRC-checked. A DEFLATE entry is inflated whole
(CRC-checked) and its block copied out of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from .. import zipfmt
from ..errors import IntegrityError, UnsupportedPayload
from ..pt2.slicing import SlicePlan, plan_slice
from ..pt2.tensorinfo import TensorInfo
from ..reading.entries import EntryFetcher
from ..reading.ranges import coalesce
from ..sources import ByteSource
from ..tasks import task_group
from ..zipfmt import ZipEntry
from ..zipfmt.structs import METHOD_STORED
from .plan import LoadPlan, group_ranges
from .shards import Shard

# Runs closer than this are one request (the bytes between are read and dropped).
REQUEST_GAP = 64 << 10
# Requests in flight at once (each big one in parallel parts of its own): as many as a load's parallel
# parts, so a rank opens no more connections than a whole load (a new one cost 12 ms on a busy host).
REQUESTS_AT_ONCE = 8

# In a sharded load from a remote source, whole stored entries up to this size (biases, norms) are
# read with the cut entries' local headers, which lie beside them: one request per cluster between
# two big weights, where apart they cost two.
SMALL_WHOLE = 1 << 20

Buffers = dict[str, np.ndarray]
Landed = Callable[[Buffers], None]


@dataclass(frozen=True, slots=True)
class Block:
    """`info`: the block as a tensor viewing its own buffer (key `info.storage.entry`), whose bytes
    are runs `plan.runs` of the payload `entry`."""

    info: TensorInfo
    entry: ZipEntry
    plan: SlicePlan

    @property
    def key(self) -> str:
        return self.info.storage.entry


def split_by_shard(
    tensors: Iterable[TensorInfo], shard: Shard | None, entries: Mapping[str, ZipEntry]
) -> tuple[list[TensorInfo], list[Block]]:
    """(the tensors in the caller's order, with each cut tensor replaced by its block's info; the
    blocks). A tensor no pattern matches, or whose block is its whole dim, stays as it is."""
    ordered: list[TensorInfo] = []
    blocks: list[Block] = []
    for info in tensors:
        cut = shard.cut(info) if shard is not None else None
        if cut is None or (cut.start, cut.stop) == (0, (info.sizes or ())[cut.dim]):
            ordered.append(info)
            continue
        if info.unsupported:
            raise UnsupportedPayload(f"{info.model}/{info.name}: {info.unsupported}")
        block = _block(info, plan_slice(info, cut.index()), entries[info.storage.entry])
        ordered.append(block.info)
        blocks.append(block)
    return ordered, blocks


def _block(info: TensorInfo, plan: SlicePlan, entry: ZipEntry) -> Block:
    """The block as a tensor viewing its buffer: the runs laid end to end, or, when they hold more than
    the block (rows joined across small gaps), the block gathered row-major into a buffer of its size."""
    itemsize = plan.itemsize
    numel = math.prod(plan.shape)
    if _gathered(plan):
        strides = tuple(math.prod(plan.shape[dim + 1 :]) for dim in range(len(plan.shape)))
        offset, held = 0, plan.nbytes
    else:
        strides = tuple(stride // itemsize for stride in plan.strides)
        offset, held = plan.offset // itemsize, plan.nbytes if plan.zeros else plan.read_bytes
    storage = dataclasses.replace(
        info.storage,
        entry=f"{info.storage.entry}#{info.model}/{info.name}",
        offset=offset * itemsize,
        nbytes=held,
    )
    view = dataclasses.replace(
        info,
        sizes=plan.shape,
        strides=strides,
        storage_offset=offset,
        dim_order=tuple(range(len(plan.shape))),
        dense=_gathered(plan) or plan.read_bytes == plan.nbytes,
        numel=numel,
        nbytes=numel * itemsize,
        storage=storage,
    )
    return Block(view, entry, plan)


def _gathered(plan: SlicePlan) -> bool:
    return not plan.zeros and plan.read_bytes > plan.nbytes


def _finished(block: Block, laid: np.ndarray) -> np.ndarray:
    """The block's buffer once its runs are in `laid`: `laid` itself, or the block gathered out of it."""
    plan = block.plan
    if not _gathered(plan):
        return laid
    element = np.dtype(f"V{plan.itemsize}")
    out = np.empty(plan.nbytes, dtype=np.uint8)
    out.view(element).reshape(plan.shape)[...] = np.ndarray(
        plan.shape, element, laid, plan.offset, plan.strides
    )
    return out


@dataclass(frozen=True, slots=True)
class Piece:
    """Archive bytes [start, start + length) go to `at` in block `block`'s buffer."""

    block: int
    at: int
    start: int
    length: int


def group_requests(pieces: Iterable[Piece], gap: int = REQUEST_GAP) -> list[tuple[int, int, list[Piece]]]:
    """(start, end, pieces) of each request: runs less than `gap` apart (or overlapping: a tied
    name's block) share one."""
    ordered = sorted(pieces, key=lambda piece: piece.start)
    spans = coalesce([(piece.start, piece.start + piece.length) for piece in ordered], gap)
    requests: list[tuple[int, int, list[Piece]]] = [(low, high, []) for low, high in spans]
    index = 0
    for piece in ordered:
        while piece.start >= requests[index][1]:
            index += 1
        requests[index][2].append(piece)
    return requests


def set_small_apart(plan: LoadPlan, limit: int) -> tuple[LoadPlan, list[ZipEntry]]:
    """`plan` without its stored entries of at most `limit` bytes, and those entries."""
    small = {
        name: storage.entry
        for name, storage in plan.storages.items()
        if not storage.zeros and storage.entry.method == METHOD_STORED and storage.entry.size <= limit
    }
    storages = {name: storage for name, storage in plan.storages.items() if name not in small}
    backed = [storage.entry for storage in storages.values() if not storage.zeros]
    return LoadPlan(plan.tensors, storages, tuple(group_ranges(backed))), list(small.values())


async def read_blocks(
    source: ByteSource, fetcher: EntryFetcher, blocks: list[Block], landed: Landed, nearby: list[ZipEntry]
) -> Buffers:
    """Every block's buffer by its key, and each of the whole entries `nearby` by its name (read with
    the local headers, CRC-checked); `landed` hears of each once it is in."""
    buffers: Buffers = {
        block.key: np.empty(block.plan.read_bytes or block.info.storage.nbytes, dtype=np.uint8)
        for block in blocks
    }
    pending = {index: len(block.plan.runs) for index, block in enumerate(blocks)}
    done: Buffers = {}
    for index, block in enumerate(blocks):
        if block.plan.zeros or not block.plan.runs:
            buffers[block.key][:] = 0
            done[block.key] = buffers[block.key]
            del pending[index]
    landed(done)
    stored = [index for index in pending if blocks[index].entry.method == METHOD_STORED]
    by_entry: dict[str, list[int]] = {}
    for index in stored:
        by_entry.setdefault(blocks[index].entry.name, []).append(index)
    gate = asyncio.Semaphore(REQUESTS_AT_ONCE)

    def target(piece: Piece) -> np.ndarray:
        return buffers[blocks[piece.block].key][piece.at : piece.at + piece.length]

    def arrived(index: int) -> None:
        pending[index] -= 1
        if not pending[index]:
            finished(blocks[index])

    def finished(block: Block) -> None:
        buffers[block.key] = _finished(block, buffers[block.key])
        landed({block.key: buffers[block.key]})

    async def request(start: int, end: int, into: list[Piece]) -> None:
        async with gate:
            if len(into) == 1 and (into[0].start, into[0].length) == (start, end - start):
                piece = into[0]  # straight into the block's buffer
                await source.read_into(start, memoryview(target(piece)))
            else:
                held = np.empty(end - start, dtype=np.uint8)
                await source.read_into(start, memoryview(held))
                for piece in into:
                    target(piece)[:] = held[piece.start - start : piece.start - start + piece.length]
        for piece in into:
            arrived(piece.block)

    async def inflated(block: Block) -> None:
        async with gate:
            whole = np.frombuffer(await fetcher.read(block.entry), dtype=np.uint8)  # CRC-checked
        at = 0
        for low, high in block.plan.runs:
            buffers[block.key][at : at + high - low] = whole[low:high]
            at += high - low
        finished(block)

    async with task_group() as group:  # the first failure cancels the rest

        def located(names: Iterable[str]) -> None:
            """Start the requests of the blocks whose entries' data offsets are now known."""
            known = fetcher.known_offsets
            pieces = []
            for index in (index for name in names for index in by_entry.get(name, ())):
                block, at = blocks[index], 0
                for low, high in block.plan.runs:
                    pieces.append(Piece(index, at, known[block.entry.name] + low, high - low))
                    at += high - low
            for start, end, into in group_requests(pieces):
                group.create_task(request(start, end, into))

        def wholes_landed(wholes: Buffers) -> None:
            buffers.update(wholes)
            landed(wholes)

        for index in pending:
            if blocks[index].entry.method != METHOD_STORED:
                group.create_task(inflated(blocks[index]))
        entries = [blocks[index].entry for index in stored]
        await _locate(source, fetcher, entries, nearby, gate, located, wholes_landed)
    return buffers


async def _locate(
    source: ByteSource,
    fetcher: EntryFetcher,
    entries: list[ZipEntry],
    nearby: list[ZipEntry],
    gate: asyncio.Semaphore,
    located: Callable[[list[str]], None],
    wholes_landed: Landed,
) -> None:
    """Where each of `entries`' data starts (known, else from its local header), and the whole entries
    `nearby` (CRC-checked): headers and those entries that lie close together in one request, the
    requests in parallel; `located` hears of the entries whose offsets are known as each request
    lands (so their blocks' requests start at once), `wholes_landed` of the whole entries."""
    known = fetcher.known_offsets
    located([entry.name for entry in entries if entry.name in known])
    wanted = {entry.name: entry for entry in entries if entry.name not in known}
    whole = {entry.name: entry for entry in nearby}
    regions = {
        name: (
            entry.header_offset,
            min(entry.header_offset + zipfmt.local_header_guess(entry), entry.region_end),
        )
        for name, entry in wanted.items()
    }
    regions.update({name: (entry.header_offset, entry.region_end) for name, entry in whole.items()})
    spans = coalesce(list(regions.values()), REQUEST_GAP)

    async def span(start: int, end: int) -> None:
        async with gate:
            data = memoryview(await source.read(start, end))
        inside = [name for name, (low, high) in regions.items() if start <= low and high <= end]
        found, wholes = [], {}
        for name in inside:
            low, high = regions[name]
            window = data[low - start : high - start]
            if name in whole:
                wholes[name] = _whole(whole[name], window, known)
            if name in wanted:
                offset = zipfmt.locate_data(wanted[name], window)
                if isinstance(offset, zipfmt.NeedUntil):
                    await fetcher.data_offset(wanted[name])  # a header longer than guessed: on its own
                else:
                    known[name] = offset
                found.append(name)
        wholes_landed(wholes)
        located(found)

    async with task_group() as group:
        for start, end in spans:
            group.create_task(span(start, end))


def _whole(entry: ZipEntry, window: memoryview, known: dict[str, int]) -> np.ndarray:
    """A whole stored entry out of archive bytes from its local header, CRC-checked."""
    found = zipfmt.locate_data(entry, window, entry.size)
    if isinstance(found, zipfmt.NeedUntil):
        raise IntegrityError(f"entry {entry.name!r}: its data runs past its region")
    known[entry.name] = found
    data = window[found - entry.header_offset : found - entry.header_offset + entry.size]
    zipfmt.verify_crc(entry, zipfmt.crc32(data))
    return np.frombuffer(data, dtype=np.uint8).copy()
