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
the same requests as the headers beside them. GPT-2 at world 4 from S3: 55 requests for the first
and last ranks, 105 for the others (where the header and the block lie apart), against 62 for a
whole load.

Over HTTP, where the server answers several ranges a request (`HttpSource.serves_multiple_ranges`,
nginx), those requests are the ranges of up to `REQUESTS_AT_ONCE` multi-range requests, and a block
of several runs (a column block: a run a row) is planned again with runs apart past `PART_GAP` and
read as the parts of multi-range requests, straight into its buffer: a rank reads its share and each
part's head, where one range a request would read the rows its runs lie in. There, and from local
files, such a block is read a chunk of rows at a time into reused scratch buffers and gathered into
its place as each chunk lands (`rowchunks.py`): what a rank holds is its share, not the rows.

A block is not its whole entry, so no CRC-32 covers it: its bytes are length-checked and read
from the version opened (SourceChanged otherwise). A cut that spans its whole dim (world size 1,
say) is no block: that tensor is loaded whole, CRC-checked. A DEFLATE entry is inflated whole
(CRC-checked) and its block copied out of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from .. import zipfmt
from ..errors import IntegrityError, UnsupportedPayload
from ..pt2.slicing import SlicePlan, gather_into, plan_slice
from ..pt2.tensorinfo import TensorInfo
from ..reading.entries import EntryFetcher
from ..reading.ranges import coalesce
from ..sources import ByteSource, multirange
from ..sources.parallel import PROBE_BYTES, rate
from ..tasks import task_group
from ..zipfmt import ZipEntry
from ..zipfmt.structs import METHOD_STORED
from .plan import LoadPlan, group_ranges
from .prefault import prefaulting
from .rowchunks import SCRATCH_AT_ONCE, SCRATCH_BYTES, RowChunks, Scratch, gather_rows, row_chunks
from .shards import Shard
from .storages import aligned_empty

# Runs closer than this are one request (the bytes between are read and dropped).
REQUEST_GAP = 64 << 10
# torch's ZIP writer starts every entry's data at a multiple of this (its local header's extra field pads)
DATA_ALIGNMENT = 64
# Runs of a block read in a multi-range request are parts apart where more than this lies between
# them: a part's boundary and headers cost about 110 bytes (nginx's), a run's share of the Range header 20.
PART_GAP = 128
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
    are runs `plan.runs` of the payload `entry`: laid end to end, or (`gathered`) the block gathered
    row-major out of them. `whole[index]` is the block."""

    info: TensorInfo
    entry: ZipEntry
    plan: SlicePlan
    whole: TensorInfo
    index: tuple[slice, ...]
    gathered: bool

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
        block = cut_block(info, cut.index(), entries[info.storage.entry])
        ordered.append(block.info)
        blocks.append(block)
    return ordered, blocks


def cut_block(info: TensorInfo, index: tuple[slice, ...], entry: ZipEntry, key: str | None = None) -> Block:
    """The block as a tensor viewing its buffer: the runs laid end to end, or, when they hold more than
    the block (rows joined across small gaps), the block gathered row-major into a buffer of its size.
    `key` names its buffer (default: the entry and the tensor, one block a tensor as a shard cuts it)."""
    plan = plan_slice(info, index)
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
        entry=key or f"{info.storage.entry}#{info.model}/{info.name}",
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
    return Block(view, entry, plan, info, index, _gathered(plan))


def _gathered(plan: SlicePlan) -> bool:
    return not plan.zeros and plan.read_bytes > plan.nbytes


def _row_major(plan: SlicePlan) -> bool:
    """The runs laid end to end are the block row-major."""
    if plan.zeros or plan.offset or plan.read_bytes != plan.nbytes:
        return False
    step = plan.itemsize
    for size, stride in zip(reversed(plan.shape), reversed(plan.strides), strict=True):
        if size > 1 and stride != step:
            return False
        step *= size
    return True


def _finished(block: Block, laid: np.ndarray) -> np.ndarray:
    """The block's buffer once its runs are in `laid`: `laid` itself, or the block gathered out of it."""
    plan = block.plan
    if not block.gathered or _row_major(plan):
        return laid
    out = np.empty(plan.nbytes, dtype=np.uint8)
    gather_into(laid, plan, out)
    return out


@dataclass(frozen=True, slots=True)
class Piece:
    """A run of block `block`: archive bytes [start, start + length), read on the assumption that its
    entry's data starts at `offset`, go to `at` in the block's buffer; or, for a block read in row
    chunks (`rows` > 0), they hold `rows` rows of the block, gathered to `at` in its buffer."""

    block: int
    at: int
    start: int
    length: int
    offset: int
    rows: int = 0


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
    finer: set[int] = set()
    multiple = len(blocks) > 1 and await source.serves_multiple_ranges()
    if multiple:  # the runs of column blocks, not the rows they lie in
        finer = {index for index, block in enumerate(blocks) if _scattered(block)}
        blocks = [_finer(block) if index in finer else block for index, block in enumerate(blocks)]
    else:  # the rows that column blocks lie in are read anyway: gathered a chunk of rows at a time
        blocks = [_coarser(block) for block in blocks]
    reads = _BlockReads(source, fetcher, blocks, landed, finer)
    wanted, several = reads.wanted(nearby, written_as_torch_does(fetcher.known_offsets, entries))
    requests = reads.requests(wanted)
    kept = [(start, end) for start, end, inside in requests if any(reads.viewed(item) for item in inside)]
    arena, slots = _arena(kept)
    # (the first failure cancels the rest)
    async with prefaulting(arena), prefaulting(reads.gathered), task_group() as group:
        reads.group = group
        for index, block in enumerate(blocks):
            if block.key in reads.missing and block.entry.method != METHOD_STORED:
                group.create_task(reads.inflated(index))
        spans = []
        for start, end, inside in requests:
            slot = slots.get(start)
            if slot is not None:
                held: np.ndarray | None = arena[slot : slot + end - start]
            elif reads.used_up(inside) and not multiple:
                held = None  # a scratch buffer, taken when the request starts
            else:
                held = aligned_empty(end - start, start)
            spans.append((start, end, inside, held))
        if multiple:  # a few multi-range requests, each about as big, instead of one a span
            group.create_task(reads.spans_requests(spans))
        else:
            for start, end, inside, held in spans:
                group.create_task(reads.request(start, end, inside, held))
        reads.launch_several(several)
    if reads.missing:  # cannot happen unless the bookkeeping above is broken
        raise AssertionError(f"blocks {sorted(reads.missing)} did not come in")
    return reads.buffers


def _shares(spans: list, count: int) -> list[list]:
    """`spans` (start, end, ...) in order, as up to `count` groups of about the same bytes, each
    split further where its Range header would grow past multirange.batches' bound."""
    total = sum(span[1] - span[0] for span in spans)
    groups: list[list] = [[]]
    size = 0
    for span in spans:
        if groups[-1] and size >= total / count:
            groups.append([])
            size = 0
        groups[-1].append(span)
        size += span[1] - span[0]
    out = []
    for group in groups:
        by_range = {(span[0], span[1]): span for span in group}
        out += [[by_range[rng] for rng in batch] for batch in multirange.batches(list(by_range))]
    return out


def _probe(spans: list, longest: int) -> list:
    """Spans (start, end, ...) to time a connection with: in order, none longer than `longest`, until
    PROBE_BYTES are in them; or the first span."""
    probe, size = [], 0
    for span in spans:
        if span[1] - span[0] <= longest:
            probe.append(span)
            size += span[1] - span[0]
            if size >= PROBE_BYTES:
                break
    return probe or spans[:1]


def _scattered(block: Block) -> bool:
    """A stored block of several runs, or of rows joined across small gaps (a column block): over
    HTTP, read as a part a run where the server answers multi-range requests."""
    return block.entry.method == METHOD_STORED and (block.gathered or len(block.plan.runs) > 1)


def _finer(block: Block) -> Block:
    """The block read as its own runs, parts of multi-range requests (apart where more than a part's
    head lies between them)."""
    return dataclasses.replace(block, plan=plan_slice(block.whole, block.index, PART_GAP))


def _coarser(block: Block) -> Block:
    """A stored block of several runs laid end to end row-major (a column block of long rows) as the
    one run they lie in, where that run is close enough to read whole: then gathered a chunk of rows at
    a time, into a buffer laid out as before."""
    if block.entry.method != METHOD_STORED or len(block.plan.runs) < 2 or not _row_major(block.plan):
        return block
    plan = plan_slice(block.whole, block.index, REQUEST_GAP)
    if len(plan.runs) != 1:
        return block
    return dataclasses.replace(block, plan=plan, gathered=_gathered(plan))


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
    its own, the runs copied in, or (the `finer` blocks) received straight into it as the parts of
    multi-range requests. A whole entry is copied out (small: its request's bytes go).

    A gathered block of one run (a column block, its rows joined across small gaps) is read in chunks
    of whole rows (`RowChunks`), each gathered into the block's buffer as it lands; requests holding
    only bytes used up that way are cut at SCRATCH_BYTES and received into reused buffers
    (`rowchunks.Scratch`), so such a rank backs its share and a few chunks, not every row it reads."""

    def __init__(
        self,
        source: ByteSource,
        fetcher: EntryFetcher,
        blocks: list[Block],
        landed: Landed,
        finer: set[int],
    ) -> None:
        self.source, self.fetcher, self.blocks, self.landed = source, fetcher, blocks, landed
        self.finer = finer  # the blocks whose runs are parts of multi-range requests
        self.scratch = Scratch(SCRATCH_BYTES, SCRATCH_AT_ONCE)
        self.chunks: dict[int, RowChunks] = {}  # the blocks read in row chunks, by index
        self.places: dict[int, int] = {}  # where each of them lies in `gathered`
        self.offsets = fetcher.known_offsets  # confirmed data offsets, by entry name
        self.assumed: dict[str, int] = {}  # predicted, until the entry's local header is read
        self.tentative: dict[str, list[tuple[int, int]]] = {}  # (block, runs) in at an unconfirmed offset
        self.by_entry: dict[str, list[int]] = {}
        self.buffers: Buffers = {}
        self.missing: dict[str, int] = {}  # runs still to come in right, by block key
        self.twins: dict[int, list[int]] = {}  # finer blocks with the same runs as this one (tied names)
        self.gate = asyncio.Semaphore(REQUESTS_AT_ONCE)
        self.group: asyncio.TaskGroup | None = None
        done: Buffers = {}
        for index, block in enumerate(blocks):
            if block.plan.zeros or not block.plan.runs:
                done[block.key] = self.buffers[block.key] = np.zeros(block.info.storage.nbytes, np.uint8)
                continue
            if block.entry.method == METHOD_STORED:
                self.by_entry.setdefault(block.entry.name, []).append(index)
                chunks = row_chunks(block.plan, SCRATCH_BYTES) if block.gathered else None
                if chunks is not None and index not in finer:  # (a finer block's runs are parts)
                    self.chunks[index] = chunks
            self.missing[block.key] = self.count(index)
        # One buffer for the blocks read in row chunks (faulted in on a thread while they come in)
        at = 0
        for index in self.chunks:
            self.places[index] = at
            at += -(-blocks[index].plan.nbytes // DATA_ALIGNMENT) * DATA_ALIGNMENT
        self.gathered = aligned_empty(at, 0)
        landed(done)

    def wanted(self, nearby: list[ZipEntry], predict: bool) -> tuple[list[Wanted], list[tuple[int, int]]]:
        """What the first requests read: the runs at known or predicted offsets, the local headers not
        known, the whole entries `nearby`; and the finer blocks with the offset they are read at."""
        wanted: list[Wanted] = []
        several: list[tuple[int, int]] = []
        for name, indexes in self.by_entry.items():
            offset = self.offsets.get(name)
            entry = self.blocks[indexes[0]].entry
            if offset is None:
                wanted.append(_header_region(entry))
                if not predict:
                    continue
                offset = self.assumed[name] = predicted_offset(entry)
            pieces, finer = self.pieces(name, offset)
            wanted += pieces
            several += finer
        return wanted + [
            Region(entry, entry.header_offset, entry.region_end, True) for entry in nearby
        ], several

    def count(self, index: int) -> int:
        """How many pieces block `index` comes in."""
        chunks = self.chunks.get(index)
        return len(self.blocks[index].plan.runs) if chunks is None else len(chunks.rows)

    def requests(self, wanted: list[Wanted]) -> list[tuple[int, int, list[Wanted]]]:
        """`group_requests`, with each request whose bytes are all used up as they arrive cut into
        requests of at most the scratch size (between what lies in it)."""
        cut: list[tuple[int, int, list[Wanted]]] = []
        for start, end, inside in group_requests(wanted):
            if end - start <= self.scratch.size or not self.used_up(inside):
                cut.append((start, end, inside))
                continue
            low, high, group = inside[0].start, _end(inside[0]), [inside[0]]
            for item in inside[1:]:  # in order of their starts
                if max(high, _end(item)) - low > self.scratch.size:
                    cut.append((low, high, group))
                    low, high, group = item.start, _end(item), []
                group.append(item)
                high = max(high, _end(item))
            cut.append((low, high, group))
        return cut

    def used_up(self, inside: list[Wanted]) -> bool:
        """Whether nothing in a request's bytes is kept as a view of them (all copied or gathered out)."""
        return all(
            not isinstance(item, Piece) or item.rows > 0 or len(self.blocks[item.block].plan.runs) > 1
            for item in inside
        )

    def viewed(self, item: Wanted) -> bool:
        """A run that is its block's buffer as received."""
        if not isinstance(item, Piece):
            return False
        block = self.blocks[item.block]
        return len(block.plan.runs) == 1 and (not block.gathered or _row_major(block.plan))

    def pieces(self, name: str, offset: int) -> tuple[list[Piece], list[tuple[int, int]]]:
        """The runs of entry `name`'s blocks at data offset `offset`; the finer ones as (block, offset)."""
        pieces, finer = [], []
        for index in self.by_entry[name]:
            if index in self.finer:
                finer.append((index, offset))
                continue
            pieces += self._pieces_of(index, offset)
        return pieces, finer

    def launch(self, wanted: list[Wanted], several: list[tuple[int, int]]) -> None:
        """Requests for `wanted`, each into a buffer of its own (a scratch one where all its bytes are
        used up as they arrive), and multi-range ones for `several`."""
        assert self.group is not None
        for start, end, inside in self.requests(wanted):
            held = None if self.used_up(inside) else aligned_empty(end - start, start)
            self.group.create_task(self.request(start, end, inside, held))
        self.launch_several(several)

    def launch_several(self, several: list[tuple[int, int]]) -> None:
        """Multi-range requests for the runs of finer blocks (block, data offset), in archive order, each
        request's Range header kept short (multirange.batches); a block with the same runs as one before
        it (a tied name) is a copy of it, one whose runs overlap another's is read apart."""
        assert self.group is not None
        runs: list[tuple[int, int]] = []
        owners: list[tuple[int, int, int, list[int]]] = []  # (block, its first run in `runs`, offset, ats)
        firsts: dict[tuple[str, int, tuple[tuple[int, int], ...]], int] = {}
        apart: list[Piece] = []
        for index, offset in sorted(several, key=lambda item: item[1] + self.blocks[item[0]].plan.runs[0][0]):
            block = self.blocks[index]
            same = firsts.setdefault((block.entry.name, offset, block.plan.runs), index)
            if same != index:
                if index not in self.twins.setdefault(same, []):
                    self.twins[same].append(index)
                continue
            first = block.plan.runs[0][0] + offset
            if runs and first < runs[-1][1]:
                apart += self._pieces_of(index, offset)
                continue
            ats = list(itertools.accumulate((high - low for low, high in block.plan.runs), initial=0))
            owners.append((index, len(runs), offset, ats))
            runs += [(offset + low, offset + high) for low, high in block.plan.runs]
        batches = multirange.batches(runs)
        owner, done = 0, 0
        for batch in batches:  # each batch: (block, its runs [low, high), offset, where run low goes)
            parts: list[tuple[int, int, int, int, int]] = []
            end = done + len(batch)
            while done < end:
                index, base, offset, ats = owners[owner]
                stop = min(base + len(self.blocks[index].plan.runs), end)
                parts.append((index, done - base, stop - base, offset, ats[done - base]))
                done = stop
                if stop == base + len(self.blocks[index].plan.runs):
                    owner += 1
            self.group.create_task(self.ranges_request(parts))
        for start, end, inside in self.requests(apart):
            held = None if self.used_up(inside) else aligned_empty(end - start, start)
            self.group.create_task(self.request(start, end, inside, held))

    def _pieces_of(self, index: int, offset: int) -> list[Piece]:
        """Block `index`'s runs (or row chunks) at data offset `offset`, each with where it goes in the
        block's buffer."""
        chunks = self.chunks.get(index)
        if chunks is not None:
            start = offset + self.blocks[index].plan.runs[0][0] + chunks.first
            pieces = []
            for low, high in chunks.rows:
                at, first = low * chunks.row_bytes, start + low * chunks.step
                length = (high - low - 1) * chunks.step + chunks.span
                pieces.append(Piece(index, at, first, length, offset, high - low))
            return pieces
        pieces, at = [], 0
        for low, high in self.blocks[index].plan.runs:
            pieces.append(Piece(index, at, offset + low, high - low, offset))
            at += high - low
        return pieces

    async def ranges_request(self, parts: list[tuple[int, int, int, int, int]]) -> None:
        """One multi-range request for runs [low, high) of blocks (block, low, high, offset, where run low
        goes in the block's buffer), each run straight into its place in its block's buffer."""
        async with self.gate:
            parts = [part for part in parts if not self._refuted(part[0], part[3])]
            if not parts:  # runs at a prediction refuted while they waited: read again elsewhere
                return
            ranges: list[tuple[int, int]] = []
            into: list[memoryview] = []  # each block's runs of this request lie end to end in its buffer
            for index, low, high, offset, at in parts:
                runs = self.blocks[index].plan.runs[low:high]
                ranges += [(offset + start, offset + end) for start, end in runs]
                length = sum(end - start for start, end in runs)
                into.append(memoryview(self.own(index))[at : at + length])
            await self.source.read_ranges_into(ranges, into, fallback_gap=REQUEST_GAP)
        for index, low, high, offset, _ in parts:
            self.arrived_runs(index, high - low, offset)

    def target(self, piece: Piece) -> np.ndarray:
        """Where a run goes in its block's own buffer."""
        return self.own(piece.block)[piece.at : piece.at + piece.length]

    async def request(self, start: int, end: int, inside: list[Wanted], held: np.ndarray | None) -> None:
        """Archive bytes [start, end) into `held` (None: a scratch buffer, given back once what lies in
        it is used up), then what lies in them (`received`)."""
        async with self.gate:
            inside = self._live(inside)
            if not inside:  # runs at a prediction refuted while they waited: read again elsewhere
                return
            if held is None:
                async with self.scratch.lent(end - start) as lent:
                    await self.source.read_into(start, memoryview(lent))
                    await self.received(start, inside, lent)
                return
            await self.source.read_into(start, memoryview(held))
        await self.received(start, inside, held)

    async def spans_requests(self, spans: list[tuple[int, int, list[Wanted], np.ndarray]]) -> None:
        """The spans as up to REQUESTS_AT_ONCE multi-range requests of about the same bytes. Where the
        source keeps to one connection when it is fast (`HttpOptions.fast_connection`), a few small
        spans (`_probe`) are sent first, alone, and timed: at least that fast, the rest go as few
        requests as their Range headers allow (from loopback nginx a dim-0 rank took about 60 ms so, 84
        ms as eight requests at once); otherwise as the eight."""
        fast = self.source.fast_connection
        if fast is not None and len(spans) > 1:
            probe = _probe(spans, self.source.part_size)
            began = time.monotonic()
            await self.spans_request(probe)
            probed = {id(span) for span in probe}
            spans = [span for span in spans if id(span) not in probed]
            one = rate(sum(end - start for start, end, *_ in probe), began) >= fast
            shares = _shares(spans, 1 if one else REQUESTS_AT_ONCE) if spans else []
        else:
            shares = _shares(spans, REQUESTS_AT_ONCE)
        async with task_group() as group:
            for share in shares:
                group.create_task(self.spans_request(share))

    async def spans_request(self, spans: list[tuple[int, int, list[Wanted], np.ndarray]]) -> None:
        """Several requests' spans (start, end, what lies in them, where their bytes go) as the ranges
        of one multi-range request, then what lies in each (`received`)."""
        async with self.gate:
            spans = [
                (start, end, live, held) for start, end, inside, held in spans if (live := self._live(inside))
            ]
            if not spans:
                return
            ranges = [(start, end) for start, end, _, _ in spans]
            await self.source.read_ranges_into(ranges, [memoryview(held) for *_, held in spans])
        for start, _, inside, held in spans:
            await self.received(start, inside, held)

    def _live(self, inside: list[Wanted]) -> list[Wanted]:
        """`inside` without the runs read at an offset their entry's header has refuted."""
        return [
            item
            for item in inside
            if not (isinstance(item, Piece) and self._refuted(item.block, item.offset))
        ]

    async def received(self, start: int, inside: list[Wanted], held: np.ndarray) -> None:
        """What lies in archive bytes from `start` in `held`: headers first (a run right after its
        header in one request is confirmed at once), whole entries, runs."""
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

    def _refuted(self, index: int, offset: int) -> bool:
        """Runs of block `index` read at `offset`, which its entry's header has refuted."""
        confirmed = self.offsets.get(self.blocks[index].entry.name)
        return confirmed is not None and confirmed != offset

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
            for index, count in self.tentative.pop(name, []):
                self.accepted(index, count)
            return
        self.tentative.pop(name, None)
        if assumed is not None:  # mispredicted: what came in at the wrong offset goes
            for index in self.by_entry[name]:
                block = self.blocks[index]
                self.buffers.pop(block.key, None)
                self.missing[block.key] = self.count(index)
        self.launch(*self.pieces(name, offset))

    def arrived(self, piece: Piece, data: np.ndarray) -> None:
        """A run's bytes are in `data`: in the block's buffer unless read at a refuted offset."""
        if self._refuted(piece.block, piece.offset):
            return
        block = self.blocks[piece.block]
        if piece.rows:
            chunks = self.chunks[piece.block]
            rows = self.own(piece.block)[piece.at : piece.at + piece.rows * chunks.row_bytes]
            gather_rows(block.plan, chunks, data, rows)
        elif len(block.plan.runs) == 1:
            self.buffers[block.key] = data  # a view: the block, or what it is gathered from
        else:
            self.target(piece)[:] = data
        self.arrived_runs(piece.block, 1, piece.offset)

    def arrived_runs(self, index: int, count: int, offset: int) -> None:
        """`count` runs of block `index`, read at `offset`, are in its buffer: counted once the offset is
        confirmed; dropped when the entry's header refuted it."""
        if self._refuted(index, offset):
            return
        name = self.blocks[index].entry.name
        if name in self.offsets:
            self.accepted(index, count)
        else:
            self.tentative.setdefault(name, []).append((index, count))

    def own(self, index: int) -> np.ndarray:
        """Block `index`'s own buffer: its runs laid end to end, or the block itself (read in row chunks)."""
        block = self.blocks[index]
        buffer = self.buffers.get(block.key)
        if buffer is None:
            if index in self.chunks:
                place = self.places[index]
                buffer = self.gathered[place : place + block.plan.nbytes]
            else:
                buffer = np.empty(block.plan.read_bytes, np.uint8)
            self.buffers[block.key] = buffer
        return buffer

    def accepted(self, index: int, count: int) -> None:
        block = self.blocks[index]
        self.missing[block.key] -= count
        if not self.missing[block.key]:
            self.finished(index)
            for twin in self.twins.pop(index, ()):  # the same runs: the same bytes
                self.buffers[self.blocks[twin].key] = self.buffers[block.key]
                self.finished(twin)

    def finished(self, index: int) -> None:
        block = self.blocks[index]
        del self.missing[block.key]
        if index not in self.chunks:  # (row chunks are gathered as they land)
            self.buffers[block.key] = _finished(block, self.buffers[block.key])
        self.landed({block.key: self.buffers[block.key]})

    async def inflated(self, index: int) -> None:
        block = self.blocks[index]
        async with self.gate:
            whole = np.frombuffer(await self.fetcher.read(block.entry), dtype=np.uint8)  # CRC-checked
        buffer, at = self.own(index), 0
        for low, high in block.plan.runs:
            buffer[at : at + high - low] = whole[low:high]
            at += high - low
        self.finished(index)


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
