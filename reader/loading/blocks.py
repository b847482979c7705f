"""A rank's blocks of sharded tensors: only their bytes, as one plan of coalesced, parallel reads.

A block is a slice (`reader.pt2.slicing.plan_slice`: which byte runs of the storage it needs,
and the strided view over those runs laid end to end). Each block has a buffer
holding its runs laid end to end (or, when the runs hold more than the block, because rows were
joined across small gaps, the block gathered row-major out of them: a rank keeps only its share),
and a `TensorInfo` that views that buffer (its storage entry is the block's key), so the arrays
and torch tensors are built as for whole storages.

The reads: the runs of every block, in archive offsets, sorted and grouped into requests where
less than `REQUEST_GAP` lies between two runs (a gap costs less than a round trip); requests are
received several at a time, each big one in parallel parts by the source. A dim-0 block of a
dense row-major tensor is one run: exactly its bytes are read, into one buffer with the other
dim-0 blocks (huge pages, faulted in on a thread), and the block is a view of them.

Each entry's data offset comes from its local header. torch's ZIP writer pads every local header
so that data starts at a multiple of 64 (`predicted_offset`); when the open's own entries lie where
that rule puts them, every block's requests start at once at the predicted offsets, in the same
requests as the headers where they lie close (the header and block of rank 0, the block of the last
rank and the next header), and count only once the header confirms the offset (else they are read
again: never wrong bytes). Remotely the small whole tensors (biases, norms: `SMALL_WHOLE`) come in
the same requests as the headers beside them. GPT-2 at world 4: 55 requests for the first and last
ranks, 105 for the others (where the header and the block lie apart), against 62 for a whole load.

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
from .prefault import prefaulting
from .shards import Shard
from .storages import aligned_empty

# Runs closer than this are one request (the bytes between are read and dropped).
REQUEST_GAP = 64 << 10
# torch's ZIP writer starts every entry's data at a multiple of this (its local header's extra field pads)
DATA_ALIGNMENT = 64
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
    """Run `run` of block `block`: archive bytes [start, start + length), read on the assumption that
    its entry's data starts at `offset`, go to `at` in the block's buffer."""

    block: int
    run: int
    at: int
    start: int
    length: int
    offset: int


@dataclass(frozen=True, slots=True)
class Region:
    """Archive bytes [start, end) from `entry`'s local header: to find where its data starts
    (`whole=False`), or its whole stored entry (`whole=True`, CRC-checked)."""

    entry: ZipEntry
    start: int
    end: int
    whole: bool


Wanted = Piece | Region


def group_requests(wanted: Iterable[Wanted], gap: int = REQUEST_GAP) -> list[tuple[int, int, list[Wanted]]]:
    """(start, end, what lies in it) of each request: what lies less than `gap` apart (or overlaps: a
    tied name's block) shares one."""
    ordered = sorted(wanted, key=lambda item: item.start)
    spans = coalesce([(item.start, _end(item)) for item in ordered], gap)
    requests: list[tuple[int, int, list[Wanted]]] = [(low, high, []) for low, high in spans]
    index = 0
    for item in ordered:
        while item.start >= requests[index][1]:
            index += 1
        requests[index][2].append(item)
    return requests


def _end(item: Wanted) -> int:
    return item.start + item.length if isinstance(item, Piece) else item.end


def predicted_offset(entry: ZipEntry) -> int:
    """Where torch's ZIP writer puts an entry's data: after the local header (30 bytes, the name, and
    an extra field of at least its own 4-byte header) padded to the next multiple of 64."""
    least = entry.header_offset + zipfmt.structs.LOCAL_HEADER.size + len(entry.raw_name) + 4
    return least + (-least) % DATA_ALIGNMENT


def written_as_torch_does(known: Mapping[str, int], entries: Mapping[str, ZipEntry] | None) -> bool:
    """True when every data offset found so far (the open's metadata entries) lies where
    `predicted_offset` puts it: the archive's other entries are predicted (an archive another tool
    wrote is read header first, as a prediction that misses costs its bytes twice)."""
    if not entries:
        return False
    checked = [name for name in known if name in entries]
    return bool(checked) and all(known[name] == predicted_offset(entries[name]) for name in checked)


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
    source: ByteSource,
    fetcher: EntryFetcher,
    blocks: list[Block],
    landed: Landed,
    nearby: list[ZipEntry],
    entries: Mapping[str, ZipEntry] | None = None,
) -> Buffers:
    """Every block's buffer by its key, and each of the whole entries `nearby` by its name (read with
    the local headers, CRC-checked); `landed` hears of each once it is in. `entries` (the archive's,
    by name) lets the data offsets of an archive torch wrote be predicted (`written_as_torch_does`)."""
    reads = _BlockReads(source, fetcher, blocks, landed)
    wanted = reads.wanted(nearby, written_as_torch_does(fetcher.known_offsets, entries))
    requests = group_requests(wanted)
    kept = [(start, end) for start, end, inside in requests if any(reads.viewed(item) for item in inside)]
    arena, slots = _arena(kept)
    async with prefaulting(arena), task_group() as group:  # the first failure cancels the rest
        reads.group = group
        for block in blocks:
            if block.key in reads.missing and block.entry.method != METHOD_STORED:
                group.create_task(reads.inflated(block))
        for start, end, inside in requests:
            slot = slots.get(start)
            held = aligned_empty(end - start, start) if slot is None else arena[slot : slot + end - start]
            group.create_task(reads.request(start, end, inside, held))
    if reads.missing:  # cannot happen unless the bookkeeping above is broken
        raise AssertionError(f"blocks {sorted(reads.missing)} did not come in")
    return reads.buffers


def _arena(spans: list[tuple[int, int]]) -> tuple[np.ndarray, dict[int, int]]:
    """One buffer for the requests whose bytes are kept (big enough for huge pages, faulted in on a
    thread meanwhile), and where each request's bytes go in it, by its start: placed so that archive
    offsets keep their alignment to 64."""
    slots, at = {}, 0
    for start, end in spans:
        at += (start - at) % DATA_ALIGNMENT
        slots[start] = at
        at += end - start
    return aligned_empty(at, 0), slots


class _BlockReads:
    """The reads of a rank's blocks, and what is in so far.

    A stored entry's block runs are read at its data offset: known (from an earlier read), predicted
    (`predicted_offset`) or, failing both, found in its local header first. Every local header not
    known is read, in the same requests as what lies near it (other headers, small whole entries, a
    block run starting right after it); a run read at a predicted offset counts only once its header
    confirms the offset. One that refutes it drops the block's buffer (what lands later at the wrong
    offset is dropped too) and its runs are read again at the offset found.

    A block of one run is a view of the bytes its request received (a dim-0 block: kept as it is; one
    whose run holds more than the block: gathered out of it); a block of several runs gets a buffer of
    its own, the runs copied in. A whole entry is copied out (small: its request's bytes go)."""

    def __init__(
        self, source: ByteSource, fetcher: EntryFetcher, blocks: list[Block], landed: Landed
    ) -> None:
        self.source, self.fetcher, self.blocks, self.landed = source, fetcher, blocks, landed
        self.offsets = fetcher.known_offsets  # confirmed data offsets, by entry name
        self.assumed: dict[str, int] = {}  # predicted, until the entry's local header is read
        self.tentative: dict[str, list[Piece]] = {}  # runs in at a prediction not yet confirmed
        self.by_entry: dict[str, list[int]] = {}
        self.buffers: Buffers = {}
        self.missing: dict[str, int] = {}  # runs still to come in right, by block key
        self.gate = asyncio.Semaphore(REQUESTS_AT_ONCE)
        self.group: asyncio.TaskGroup | None = None
        done: Buffers = {}
        for index, block in enumerate(blocks):
            if block.plan.zeros or not block.plan.runs:
                done[block.key] = self.buffers[block.key] = np.zeros(block.info.storage.nbytes, np.uint8)
                continue
            self.missing[block.key] = len(block.plan.runs)
            if block.entry.method == METHOD_STORED:
                self.by_entry.setdefault(block.entry.name, []).append(index)
        landed(done)

    def wanted(self, nearby: list[ZipEntry], predict: bool) -> list[Wanted]:
        """What the first requests read: the runs at known or predicted offsets, the local headers
        not known, the whole entries `nearby`."""
        wanted: list[Wanted] = []
        for name, indexes in self.by_entry.items():
            offset = self.offsets.get(name)
            entry = self.blocks[indexes[0]].entry
            if offset is None:
                wanted.append(_header_region(entry))
                if not predict:
                    continue
                offset = self.assumed[name] = predicted_offset(entry)
            wanted += self.pieces(name, offset)
        return wanted + [Region(entry, entry.header_offset, entry.region_end, True) for entry in nearby]

    def viewed(self, item: Wanted) -> bool:
        """A run that is its block's buffer as received."""
        if not isinstance(item, Piece):
            return False
        plan = self.blocks[item.block].plan
        return len(plan.runs) == 1 and not _gathered(plan)

    def pieces(self, name: str, offset: int) -> list[Piece]:
        pieces = []
        for index in self.by_entry[name]:
            at = 0
            for run, (low, high) in enumerate(self.blocks[index].plan.runs):
                pieces.append(Piece(index, run, at, offset + low, high - low, offset))
                at += high - low
        return pieces

    def launch(self, wanted: list[Wanted]) -> None:
        """Requests for `wanted`, each into a buffer of its own."""
        assert self.group is not None
        for start, end, inside in group_requests(wanted):
            self.group.create_task(self.request(start, end, inside, aligned_empty(end - start, start)))

    async def request(self, start: int, end: int, inside: list[Wanted], held: np.ndarray) -> None:
        """Archive bytes [start, end) into `held`, then what lies in them: headers first (a run right
        after its header in one request is confirmed at once), whole entries, runs."""
        async with self.gate:
            inside = [item for item in inside if not self.refuted(item)]
            if not inside:  # runs at a prediction refuted while they waited: read again elsewhere
                return
            await self.source.read_into(start, memoryview(held))
        for item in inside:
            if isinstance(item, Region) and not item.whole:
                await self.located(item.entry, held[item.start - start : item.end - start])
        wholes: Buffers = {}
        for item in inside:
            if isinstance(item, Region) and item.whole:
                window = held[item.start - start : item.end - start]
                wholes[item.entry.name] = _whole(item.entry, window, self.offsets)
        if wholes:
            self.buffers.update(wholes)
            self.landed(wholes)
        for item in inside:
            if isinstance(item, Piece):
                self.arrived(item, held[item.start - start : _end(item) - start])

    def refuted(self, item: Wanted) -> bool:
        """A run to read at an offset its entry's header has refuted."""
        if not isinstance(item, Piece):
            return False
        confirmed = self.offsets.get(self.blocks[item.block].entry.name)
        return confirmed is not None and confirmed != item.offset

    async def located(self, entry: ZipEntry, window: np.ndarray) -> None:
        """`entry`'s data offset from its local header in `window` (a second read for a header longer
        than guessed), and what follows from it for its runs."""
        name = entry.name
        offset = zipfmt.locate_data(entry, memoryview(window))
        if isinstance(offset, zipfmt.NeedUntil):
            offset = await self.fetcher.data_offset(entry)
        self.offsets[name] = offset
        assumed = self.assumed.pop(name, None)
        if assumed == offset:
            for piece in self.tentative.pop(name, []):
                self.accepted(piece)
            return
        self.tentative.pop(name, None)
        if assumed is not None:  # mispredicted: what came in at the wrong offset goes
            for index in self.by_entry[name]:
                block = self.blocks[index]
                self.buffers.pop(block.key, None)
                self.missing[block.key] = len(block.plan.runs)
        self.launch(self.pieces(name, offset))

    def arrived(self, piece: Piece, data: np.ndarray) -> None:
        """A run's bytes are in: counted once its offset is confirmed; dropped when they were read at
        an offset the entry's header refuted."""
        if self.refuted(piece):
            return
        block = self.blocks[piece.block]
        if len(block.plan.runs) == 1:
            self.buffers[block.key] = data  # a view: the block, or what it is gathered from
        else:
            self.own(block)[piece.at : piece.at + piece.length] = data
        name = block.entry.name
        if name in self.offsets:
            self.accepted(piece)
        else:
            self.tentative.setdefault(name, []).append(piece)

    def own(self, block: Block) -> np.ndarray:
        """The block's own buffer, its runs laid end to end."""
        buffer = self.buffers.get(block.key)
        if buffer is None:
            buffer = self.buffers[block.key] = np.empty(block.plan.read_bytes, np.uint8)
        return buffer

    def accepted(self, piece: Piece) -> None:
        block = self.blocks[piece.block]
        self.missing[block.key] -= 1
        if not self.missing[block.key]:
            self.finished(block)

    def finished(self, block: Block) -> None:
        del self.missing[block.key]
        self.buffers[block.key] = _finished(block, self.buffers[block.key])
        self.landed({block.key: self.buffers[block.key]})

    async def inflated(self, block: Block) -> None:
        async with self.gate:
            whole = np.frombuffer(await self.fetcher.read(block.entry), dtype=np.uint8)  # CRC-checked
        buffer, at = self.own(block), 0
        for low, high in block.plan.runs:
            buffer[at : at + high - low] = whole[low:high]
            at += high - low
        self.finished(block)


def _header_region(entry: ZipEntry) -> Region:
    guess = entry.header_offset + zipfmt.local_header_guess(entry)
    return Region(entry, entry.header_offset, min(guess, entry.region_end), False)


def _whole(entry: ZipEntry, window: np.ndarray, known: dict[str, int]) -> np.ndarray:
    """A whole stored entry out of archive bytes from its local header, CRC-checked."""
    found = zipfmt.locate_data(entry, memoryview(window), entry.size)
    if isinstance(found, zipfmt.NeedUntil):
        raise IntegrityError(f"entry {entry.name!r}: its data runs past its region")
    known[entry.name] = found
    data = window[found - entry.header_offset : found - entry.header_offset + entry.size]
    zipfmt.verify_crc(entry, zipfmt.crc32(memoryview(data)))
    return data.copy()
