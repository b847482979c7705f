"""The plan of a rank's block reads (pure: no I/O; `blocks.read_blocks` times the link and reads).

Which blocks: a shard cuts each matched tensor (`split_by_shard`), and a block is a slice
(`reader.pt2.slicing.plan_slice`: which byte runs of the storage it needs, and the strided view over
those runs laid end to end) with a `TensorInfo` viewing its own buffer (`cut_block`).

How each is read: a column block (a dim-1 cut of a row-major weight: a piece of every row) can be read
two ways where the server answers several ranges a request (nginx): its runs, as the parts of
multi-range requests (its share and each part's head, but every part costs client CPU: its Range
entry, its head parsed, its view), or the one run its rows lie in, read whole and gathered a chunk of
rows at a time (up to world size times the bytes, no parts). Which is faster turns on the link: with
`Link`, one connection's rate and a part's cost, `plan_blocks` prices both for each block and takes the
cheaper (bench/README: `shard.py`).
A source that answers one range a request (S3, a local file, `HttpOptions(multi_range=False)`) reads
rows. Blocks of one run (dim-0 cuts) are read as they are cut either way.

The records the requests are made of (`blockrequests.py` plans them): what is wanted (`Piece`: a run
or a chunk of rows at an assumed data offset; `Region`: a local header, or a small whole entry beside
it) grouped where less than COALESCE_GAP (sources/spans.py) lies between (`group_requests`); the runs of
blocks read as parts, batched into multi-range requests (`runs_requests`, typed `RunsPart`s); spans
spread over a few multi-range requests of about the same bytes (`spread_over`).
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..entries.offsets import header_span
from ..entries.ranges import coalesce
from ..pt2.slicing import SlicePlan, count_runs, plan_slice
from ..pt2.tensorinfo import TensorInfo
from ..sources.spans import COALESCE_GAP
from ..sources.transport import multirange
from ..zipfmt import ZipEntry
from ..zipfmt.structs import METHOD_STORED
from .plan import LoadPlan, group_ranges
from .rowchunks import RowChunks
from .shards import Shard

# Runs of a block read in a multi-range request are parts apart where more than this lies between
# them: a part's boundary and headers cost about 110 bytes (nginx's), a run's share of the Range header 20.
PART_GAP = 128
# What a part adds to the body: its boundary and headers (nginx's).
PART_HEAD = 110
# How many of a column block's runs are timed as parts, to price a part (a short probe), and how far from
# the first they may reach (what the probe reads stays small where the runs lie far apart).
PROBE_PARTS = 128
PROBE_PART_BYTES = 1 << 20
# Bytes a second at which a block's rows are gathered out of the bytes read (numpy's strided copy).
GATHER_RATE = 2e9
# torch's ZIP writer starts every entry's data at a multiple of this (its local header's extra field pads)
DATA_ALIGNMENT = 64
# In a sharded load from a remote source, whole stored entries up to this size (biases, norms) are
# read with the cut entries' local headers, which lie beside them: one request per cluster between
# two big weights, where apart they cost two.
SMALL_WHOLE = 1 << 20


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
        if cut is None or (cut.start, cut.stop) == (0, info.geometry.sizes[cut.dim]):
            ordered.append(info)
            continue
        info.check_readable()
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
    if gathered(plan):
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
        dense=gathered(plan) or plan.read_bytes == plan.nbytes,
        numel=numel,
        nbytes=numel * itemsize,
        storage=storage,
    )
    return Block(view, entry, plan, info, index, gathered(plan))


class Way(enum.Enum):
    """How a block is read."""

    AS_CUT = "as cut"  # its runs as `cut_block` planned them (one run, or a DEFLATE entry)
    PARTS = "parts"  # its runs apart past PART_GAP, the parts of multi-range requests
    ROWS = "rows"  # the run its rows lie in, read whole, gathered a chunk of rows at a time


@dataclass(frozen=True, slots=True)
class Link:
    """What the planner knows of the source, as plain values: whether a request carries several
    ranges, one connection's rate (bytes/s) and a part's cost beyond its bytes (seconds of client CPU;
    None: not timed or configured)."""

    multi_range: bool
    rate: float | None = None
    part_cost: float | None = None


@dataclass(frozen=True, slots=True)
class Priced:
    """A block's two ways, in seconds (bytes over the rate plus the parts' or the gather's CPU)."""

    parts: float
    rows: float


@dataclass(frozen=True, slots=True)
class Choice:
    """Block `block` (its index) read `way`, by `plan` (the runs read); `priced` where both were priced."""

    block: int
    way: Way
    plan: SlicePlan
    priced: Priced | None = None


@dataclass(frozen=True, slots=True)
class BlockPlan:
    """A choice a block, in the blocks' order."""

    choices: tuple[Choice, ...]

    @property
    def parts(self) -> frozenset[int]:
        """The blocks read as the parts of multi-range requests."""
        return frozenset(choice.block for choice in self.choices if choice.way is Way.PARTS)

    def blocks(self, blocks: Sequence[Block]) -> list[Block]:
        """`blocks`, each with the plan it is read by."""
        out = []
        for block, choice in zip(blocks, self.choices, strict=True):
            if choice.way is Way.ROWS:
                block = dataclasses.replace(block, plan=choice.plan, gathered=gathered(choice.plan))
            elif choice.way is Way.PARTS:  # (laid out as cut: gathered as the cut plan says)
                block = dataclasses.replace(block, plan=choice.plan)
            out.append(block)
        return out


def gathered(plan: SlicePlan) -> bool:
    """The runs hold more than the block (rows joined across small gaps): it is gathered out of them."""
    return not plan.zeros and plan.read_bytes > plan.nbytes


def row_major(plan: SlicePlan) -> bool:
    """The runs laid end to end are the block row-major."""
    if plan.zeros or plan.offset or plan.read_bytes != plan.nbytes:
        return False
    step = plan.itemsize
    for size, stride in zip(reversed(plan.shape), reversed(plan.strides), strict=True):
        if size > 1 and stride != step:
            return False
        step *= size
    return True


def scattered(block: Block) -> bool:
    """A stored block of several runs, or of rows joined across small gaps (a column block)."""
    return block.entry.method == METHOD_STORED and (block.gathered or len(block.plan.runs) > 1)


def parts_plan(block: Block) -> SlicePlan:
    """The block's own runs, apart where more than a part's head lies between them."""
    return plan_slice(block.whole, block.index, PART_GAP)


def rows_plan(block: Block) -> SlicePlan | None:
    """The one run a stored block's rows lie in (as cut, rows joined across small gaps; or its runs laid
    end to end row-major, close enough to read whole), or None where there is no such run."""
    if block.entry.method != METHOD_STORED:
        return None
    if len(block.plan.runs) == 1:
        return block.plan if block.gathered else None
    if not row_major(block.plan):
        return None
    plan = plan_slice(block.whole, block.index, COALESCE_GAP)
    return plan if len(plan.runs) == 1 else None


def parts_count(block: Block) -> tuple[int, int]:
    """How many parts `parts_plan(block)` has and the bytes they cover, without listing them."""
    return count_runs(block.whole, block.index, PART_GAP)


def price(parts: tuple[int, int], rows: SlicePlan, rate: float, part_cost: float) -> Priced:
    """Seconds to read a block as its parts (`parts_count`: its share and each part's head over the
    link, plus each part's CPU) and as `rows` (the rows over the link, plus gathering the block out
    of them)."""
    count, nbytes = parts
    return Priced(
        parts=(nbytes + count * PART_HEAD) / rate + count * part_cost,
        rows=rows.read_bytes / rate + rows.nbytes / GATHER_RATE,
    )


def needs_timing(blocks: Sequence[Block], link: Link) -> bool:
    """Whether a choice turns on the link's rate or a part's cost (and one is not known): a multi-range
    source, parts not configured free, and a column block that could be read either way."""
    unknown = link.rate is None or link.part_cost is None
    return link.multi_range and link.part_cost != 0 and unknown and any(map(_either, blocks))


def plan_blocks(blocks: Sequence[Block], link: Link) -> BlockPlan:
    """Each block's way. Without several ranges a request: the rows wherever a block has them. With
    them: a column block's parts, or its rows where they cost less (`price`; the link not timed, or
    parts that cost nothing: the parts)."""
    choices = []
    for index, block in enumerate(blocks):
        rows = rows_plan(block)
        if not link.multi_range or not scattered(block):
            if rows is None or rows is block.plan:
                choices.append(Choice(index, Way.AS_CUT, block.plan))
            else:
                choices.append(Choice(index, Way.ROWS, rows))
            continue
        if rows is None or link.rate is None or link.part_cost is None or link.part_cost == 0:
            choices.append(Choice(index, Way.PARTS, parts_plan(block)))
            continue
        priced = price(parts_count(block), rows, link.rate, link.part_cost)  # parts listed if chosen
        if priced.rows < priced.parts:
            choices.append(Choice(index, Way.ROWS, rows, priced))
        else:
            choices.append(Choice(index, Way.PARTS, parts_plan(block), priced))
    return BlockPlan(tuple(choices))


def _either(block: Block) -> bool:
    return scattered(block) and rows_plan(block) is not None


@dataclass(frozen=True, slots=True)
class Probe:
    """Archive bytes to time the link on (`speed.time_link`): [start, end) read whole (PROBE_BYTES at
    most), and `parts`, a column block's first runs, as one multi-range request."""

    start: int
    end: int
    parts: tuple[tuple[int, int], ...]


def probe(blocks: Sequence[Block], count: int = PROBE_PARTS) -> Probe | None:
    """What to time the link on: the entry of the biggest column block that could be read either way,
    and up to `count` of its runs as parts (at its local header's offset: any bytes of the entry time
    the same); None where no choice turns on it."""
    candidates = [block for block in blocks if _either(block)]
    block = max(candidates, key=lambda block: block.entry.size, default=None)
    if block is None:
        return None
    entry = block.entry
    runs = [
        (entry.header_offset + low, entry.header_offset + high)
        for low, high in parts_plan(block).runs[:count]
    ]
    parts = tuple(run for run in runs if run[1] <= min(entry.region_end, runs[0][0] + PROBE_PART_BYTES))
    return Probe(entry.header_offset, entry.region_end, parts)


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


class Grouped(NamedTuple):
    """Archive bytes [start, end) of one request and what lies in them, in order of their starts."""

    start: int
    end: int
    inside: list[Wanted]


class BlockAt(NamedTuple):
    """Block `block` (its index) read at data offset `offset`."""

    block: int
    offset: int


def group_requests(wanted: Iterable[Wanted], gap: int = COALESCE_GAP) -> list[Grouped]:
    """Each request: what lies less than `gap` apart (or overlaps: a tied name's block) shares one."""
    ordered = sorted(wanted, key=lambda item: item.start)
    spans = coalesce([(item.start, item_end(item)) for item in ordered], gap)
    requests = [Grouped(low, high, []) for low, high in spans]
    index = 0
    for item in ordered:
        while item.start >= requests[index][1]:
            index += 1
        requests[index][2].append(item)
    return requests


def item_end(item: Wanted) -> int:
    """Where a wanted item's bytes end."""
    return item.start + item.length if isinstance(item, Piece) else item.end


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


def pieces_of(index: int, plan: SlicePlan, chunks: RowChunks | None, offset: int) -> list[Piece]:
    """Block `index`'s runs (`plan`), or its chunks of rows (`chunks`), at data offset `offset`, each
    with where it goes in the block's buffer."""
    if chunks is not None:
        start = offset + plan.runs[0][0] + chunks.first
        pieces = []
        for low, high in chunks.rows:
            at, first = low * chunks.row_bytes, start + low * chunks.step
            length = (high - low - 1) * chunks.step + chunks.span
            pieces.append(Piece(index, at, first, length, offset, high - low))
        return pieces
    pieces, at = [], 0
    for low, high in plan.runs:
        pieces.append(Piece(index, at, offset + low, high - low, offset))
        at += high - low
    return pieces


@dataclass(frozen=True, slots=True)
class RunsPart:
    """Runs [low, high) of block `block` (read as parts), at data offset `offset`, going to `at` and on
    in the block's buffer: one block's share of a multi-range request."""

    block: int
    low: int
    high: int
    offset: int
    at: int
    length: int  # the bytes of those runs

    def ranges(self, plan: SlicePlan) -> list[tuple[int, int]]:
        """The archive ranges of these runs of the block (`plan`: its runs)."""
        return [(self.offset + start, self.offset + end) for start, end in plan.runs[self.low : self.high]]


@dataclass(frozen=True, slots=True)
class RunsRequests:
    """The multi-range requests for blocks read as parts (`batches`); the blocks whose runs are another
    block's (a tied name: `twins`, by the block read); and those read apart (runs overlapping another's)."""

    batches: tuple[tuple[RunsPart, ...], ...]
    twins: Mapping[int, tuple[int, ...]]
    apart: tuple[BlockAt, ...]


def runs_requests(blocks: Sequence[Block], several: Iterable[BlockAt]) -> RunsRequests:
    """Multi-range requests for the runs of blocks read as parts ((block, data offset) in `several`), in
    archive order, each request's Range header kept short (multirange.batches); a block with the same
    runs as one before it (a tied name) is a twin of it, one whose runs overlap another's is read apart."""
    runs: list[tuple[int, int]] = []
    owners: list[tuple[int, int, int, list[int]]] = []  # (block, its first run in `runs`, offset, ats)
    firsts: dict[tuple[str, int, tuple[tuple[int, int], ...]], int] = {}
    twins: dict[int, list[int]] = {}
    apart: list[BlockAt] = []
    for index, offset in sorted(several, key=lambda item: item[1] + blocks[item[0]].plan.runs[0][0]):
        block = blocks[index]
        same = firsts.setdefault((block.entry.name, offset, block.plan.runs), index)
        if same != index:
            if index not in twins.setdefault(same, []):
                twins[same].append(index)
            continue
        if runs and block.plan.runs[0][0] + offset < runs[-1][1]:
            apart.append(BlockAt(index, offset))
            continue
        ats = list(itertools.accumulate((high - low for low, high in block.plan.runs), initial=0))
        owners.append((index, len(runs), offset, ats))
        runs += [(offset + low, offset + high) for low, high in block.plan.runs]
    batches = []
    owner, done = 0, 0
    for batch in multirange.batches(runs):
        parts: list[RunsPart] = []
        end = done + len(batch)
        while done < end:
            index, base, offset, ats = owners[owner]
            count = len(blocks[index].plan.runs)
            stop = min(base + count, end)
            low, high = done - base, stop - base
            parts.append(RunsPart(index, low, high, offset, ats[low], ats[high] - ats[low]))
            done = stop
            if stop == base + count:
                owner += 1
        batches.append(tuple(parts))
    return RunsRequests(tuple(batches), {key: tuple(value) for key, value in twins.items()}, tuple(apart))


def spread_over(spans: list, count: int) -> list[list]:
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


def header_region(entry: ZipEntry) -> Region:
    """Bytes from `entry`'s local header that likely hold it whole (`offsets.header_span`)."""
    return Region(entry, *header_span(entry), False)
