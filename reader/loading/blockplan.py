"""How a rank's blocks are read: each column block as its runs or as the rows they lie in (pure).

A column block (a dim-1 cut of a row-major weight: a piece of every row) can be read two ways where
the server answers several ranges a request (nginx): its runs, as the parts of multi-range requests
(its share and each part's head, but every part costs client CPU: its Range entry, its head parsed,
its view), or the one run its rows lie in, read whole and gathered a chunk of rows at a time (up to
world size times the bytes, no parts). Which is faster turns on the link: with `Link`, one
connection's rate and a part's cost, `plan_blocks` prices both for each block and takes the cheaper
(from loopback nginx a GPT-2 dim-1 rank took 4.49x a whole load as 134k parts, 1.08x as rows). A source
that answers one range a request (S3, a local file, `HttpOptions(multi_range=False)`) reads rows.
Blocks of one run (dim-0 cuts) are read as they are cut either way.

No I/O here: `blocks.read_blocks` times the link (`sources/speed.py`) and does the reads.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..pt2.slicing import SlicePlan, plan_slice
from ..zipfmt.structs import METHOD_STORED

if TYPE_CHECKING:
    from .blocks import Block

# Runs closer than this are one request (the bytes between are read and dropped).
REQUEST_GAP = 64 << 10
# Runs of a block read in a multi-range request are parts apart where more than this lies between
# them: a part's boundary and headers cost about 110 bytes (nginx's), a run's share of the Range header 20.
PART_GAP = 128
# What a part adds to the body: its boundary and headers (nginx's).
PART_HEAD = 110
# Client CPU a part costs (its Range entry, its head parsed, its view): about 7 µs measured here
# (`HttpOptions.part_cost` sets it).
PART_COST = 7e-6
# Bytes a second at which a block's rows are gathered out of the bytes read (numpy's strided copy).
GATHER_RATE = 2e9


class Way(enum.Enum):
    """How a block is read."""

    AS_CUT = "as cut"  # its runs as `cut_block` planned them (one run, or a DEFLATE entry)
    PARTS = "parts"  # its runs apart past PART_GAP, the parts of multi-range requests
    ROWS = "rows"  # the run its rows lie in, read whole, gathered a chunk of rows at a time


@dataclass(frozen=True, slots=True)
class Link:
    """What the planner knows of the source, as plain values: whether a request carries several
    ranges, one connection's rate (bytes/s; None: not timed), and a part's cost (seconds)."""

    multi_range: bool
    rate: float | None = None
    part_cost: float = PART_COST


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
    plan = plan_slice(block.whole, block.index, REQUEST_GAP)
    return plan if len(plan.runs) == 1 else None


def price(parts: SlicePlan, rows: SlicePlan, link: Link, rate: float) -> Priced:
    """Seconds to read a block as `parts` (its share and each part's head over the link, plus each
    part's CPU) and as `rows` (the rows over the link, plus gathering the block out of them)."""
    count = len(parts.runs)
    return Priced(
        parts=(parts.read_bytes + count * PART_HEAD) / rate + count * link.part_cost,
        rows=rows.read_bytes / rate + rows.nbytes / GATHER_RATE,
    )


def needs_rate(blocks: Sequence[Block], link: Link) -> bool:
    """Whether a choice turns on the link's rate (and it is not known): a multi-range source, parts that
    cost CPU, and a column block that could be read either way."""
    return link.multi_range and link.part_cost > 0 and link.rate is None and any(map(_either, blocks))


def plan_blocks(blocks: Sequence[Block], link: Link) -> BlockPlan:
    """Each block's way. Without several ranges a request: the rows wherever a block has them. With
    them: a column block's parts, or its rows where they cost less (`price`; no rate, or parts that cost
    nothing: the parts)."""
    choices = []
    for index, block in enumerate(blocks):
        rows = rows_plan(block)
        if not link.multi_range or not scattered(block):
            if rows is None or rows is block.plan:
                choices.append(Choice(index, Way.AS_CUT, block.plan))
            else:
                choices.append(Choice(index, Way.ROWS, rows))
            continue
        parts = parts_plan(block)
        if rows is None or link.rate is None or link.part_cost == 0:
            choices.append(Choice(index, Way.PARTS, parts))
            continue
        priced = price(parts, rows, link, link.rate)
        if priced.rows < priced.parts:
            choices.append(Choice(index, Way.ROWS, rows, priced))
        else:
            choices.append(Choice(index, Way.PARTS, parts, priced))
    return BlockPlan(tuple(choices))


def _either(block: Block) -> bool:
    return scattered(block) and rows_plan(block) is not None


def probe_entry(blocks: Sequence[Block]) -> Block | None:
    """The block whose entry a link's rate is timed on: the biggest column block that could be read
    either way (its entry's bytes are read, PROBE_BYTES at most)."""
    candidates = [block for block in blocks if _either(block)]
    return max(candidates, key=lambda block: block.entry.size, default=None)
