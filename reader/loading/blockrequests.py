"""The requests of a rank's block reads (sans-IO): what `blocks.py`, the executor, sends, and where
each request's bytes go.

`RequestPlanner` decides everything about the reads once `blockplan.plan_blocks` has chosen each
block's way: at which data offset each entry's runs are read (confirmed, or predicted and to be
confirmed by the local header read in the same requests), how they are grouped into requests, which
requests' bytes are kept (a slot of one arena), received into reused scratch buffers (all used up as
they land) or into a buffer of their own, and which blocks' runs go as the parts of multi-range
requests. A prediction the header refutes is an input, not a branch of the executor: `at_offset`
plans the entry's runs again at the offset found.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..entries.offsets import DataOffsets
from ..zipfmt import ZipEntry
from ..zipfmt.structs import METHOD_STORED
from .blockplan import (
    DATA_ALIGNMENT,
    Block,
    BlockAt,
    Piece,
    Region,
    RunsRequests,
    Wanted,
    group_requests,
    header_region,
    item_end,
    pieces_of,
    row_major,
    runs_requests,
)
from .rowchunks import RowChunks, row_chunks


class Into(enum.Enum):
    """Where a request's bytes go."""

    ARENA = "arena"  # a slot of the one buffer kept for runs that are their block's buffer as received
    SCRATCH = "scratch"  # a reused scratch buffer: every byte is copied or gathered out as it lands
    OWN = "own"  # a buffer of its own, released with what is copied out of it


@dataclass(frozen=True, slots=True)
class Request:
    """Archive bytes [start, end) in one request, what lies in them (in order of their starts), and
    where they go (`slot`: where in the arena, for Into.ARENA)."""

    start: int
    end: int
    inside: tuple[Wanted, ...]
    into: Into
    slot: int = 0


@dataclass(frozen=True, slots=True)
class Reads:
    """What to send: `requests`; the multi-range requests of the blocks read as parts (`parts`) and
    the requests of those read apart (`apart`: runs overlapping another's, one range a request); the
    data offsets assumed before their headers are read (`predicted`, by entry name); the arena's
    size; and whether the `requests` not into scratch go as the ranges of multi-range requests
    (`multi_range`) rather than one a request."""

    requests: tuple[Request, ...]
    parts: RunsRequests
    apart: tuple[Request, ...] = ()
    predicted: Mapping[str, int] = field(default_factory=dict)
    arena: int = 0
    multi_range: bool = False


class RequestPlanner:
    """The requests of a rank's blocks (each read the way `plan_blocks` chose: `finer` are read as the
    parts of multi-range requests), given what is known of their data offsets.

    A block of one run is a view of the bytes its request received (kept in the arena); a gathered
    block of one run is read in chunks of whole rows (`chunks`, gathered into its slice of one buffer
    at `places` as each lands); requests whose bytes are all used up as they land are cut at the
    scratch size and received into scratch buffers."""

    def __init__(self, blocks: Sequence[Block], finer: frozenset[int], scratch: int) -> None:
        self.blocks, self.finer, self.scratch = blocks, finer, scratch
        self.by_entry: dict[str, list[int]] = {}  # the stored blocks read, by entry name
        self.chunks: dict[int, RowChunks] = {}  # the blocks read in row chunks, by index
        self.places: dict[int, int] = {}  # where each of them lies in the one gathered buffer
        self.gathered = 0  # that buffer's size
        for index, block in enumerate(blocks):
            if block.plan.zeros or not block.plan.runs or block.entry.method != METHOD_STORED:
                continue
            self.by_entry.setdefault(block.entry.name, []).append(index)
            chunks = row_chunks(block.plan, scratch) if block.gathered else None
            if chunks is not None and index not in finer:  # (a finer block's runs are parts)
                self.chunks[index] = chunks
                self.places[index] = self.gathered
                self.gathered += -(-block.plan.nbytes // DATA_ALIGNMENT) * DATA_ALIGNMENT

    def count(self, index: int) -> int:
        """How many pieces block `index` comes in."""
        chunks = self.chunks.get(index)
        return len(self.blocks[index].plan.runs) if chunks is None else len(chunks.rows)

    def first(
        self, offsets: DataOffsets, predict: bool, nearby: Sequence[ZipEntry], multi_range: bool
    ) -> Reads:
        """The first requests: each entry's runs at its confirmed offset, else its local header and
        (`predict`: an archive written as torch does) its runs at the predicted offset; and the whole
        entries `nearby` (small ones beside the headers). With `multi_range`, the requests whose bytes
        are kept go as the ranges of multi-range requests, those into scratch one a request."""
        wanted: list[Wanted] = []
        several: list[BlockAt] = []
        predicted: dict[str, int] = {}
        for name, indexes in self.by_entry.items():
            offset = offsets.known(name)
            entry = self.blocks[indexes[0]].entry
            if offset is None:
                wanted.append(header_region(entry))
                guess = offsets.predict(entry) if predict else None
                if guess is None:
                    continue
                offset = predicted[name] = guess
            several += self._runs(name, offset, wanted)
        wanted += [Region(entry, entry.header_offset, entry.region_end, True) for entry in nearby]
        requests, arena = [], 0
        for start, end, inside in self._cut(wanted):
            if any(map(self._viewed, inside)):
                arena += (start - arena) % DATA_ALIGNMENT  # archive offsets keep their alignment to 64
                requests.append(Request(start, end, inside, Into.ARENA, arena))
                arena += end - start
            elif self._used_up(inside) and (not multi_range or self._has_rows(inside)):
                requests.append(Request(start, end, inside, Into.SCRATCH))  # (rows: one range alone)
            else:
                requests.append(Request(start, end, inside, Into.OWN))
        return self._with_parts(requests, several, predicted, arena, multi_range)

    def at_offset(self, name: str, offset: int) -> Reads:
        """Entry `name`'s runs at its data offset as its local header gave it (not known when the first
        requests were planned, or predicted wrongly), one range a request."""
        wanted: list[Wanted] = []
        several = self._runs(name, offset, wanted)
        return self._with_parts(self._single(wanted), several, {}, 0, False)

    def _with_parts(
        self,
        requests: list[Request],
        several: list[BlockAt],
        predicted: dict[str, int],
        arena: int,
        multi_range: bool,
    ) -> Reads:
        """The reads, with the multi-range requests of the blocks read as parts (`runs_requests`): a
        block whose runs overlap another's is read apart, one range a request."""
        parts = runs_requests(self.blocks, several)
        apart: list[Wanted] = []
        for index, offset in parts.apart:
            apart += self.pieces(index, offset)
        return Reads(tuple(requests), parts, tuple(self._single(apart)), predicted, arena, multi_range)

    def _single(self, wanted: list[Wanted]) -> list[Request]:
        return [
            Request(start, end, inside, Into.SCRATCH if self._used_up(inside) else Into.OWN)
            for start, end, inside in self._cut(wanted)
        ]

    def _runs(self, name: str, offset: int, wanted: list[Wanted]) -> list[BlockAt]:
        """Adds entry `name`'s runs at data offset `offset` to `wanted`; returns its blocks read as parts."""
        several = []
        for index in self.by_entry[name]:
            if index in self.finer:
                several.append(BlockAt(index, offset))
            else:
                wanted += self.pieces(index, offset)
        return several

    def pieces(self, index: int, offset: int) -> list[Piece]:
        """Block `index`'s runs (or chunks of rows) at data offset `offset`."""
        return pieces_of(index, self.blocks[index].plan, self.chunks.get(index), offset)

    def _cut(self, wanted: list[Wanted]) -> list[tuple[int, int, tuple[Wanted, ...]]]:
        """`group_requests`, with each request whose bytes are all used up as they arrive cut into
        requests of at most the scratch size (between what lies in it)."""
        cut: list[tuple[int, int, tuple[Wanted, ...]]] = []
        for start, end, inside in group_requests(wanted):
            if end - start <= self.scratch or not self._used_up(inside):
                cut.append((start, end, tuple(inside)))
                continue
            low, high, group = inside[0].start, item_end(inside[0]), [inside[0]]
            for item in inside[1:]:  # in order of their starts
                if max(high, item_end(item)) - low > self.scratch:
                    cut.append((low, high, tuple(group)))
                    low, high, group = item.start, item_end(item), []
                group.append(item)
                high = max(high, item_end(item))
            cut.append((low, high, tuple(group)))
        return cut

    def _used_up(self, inside: Sequence[Wanted]) -> bool:
        """Whether nothing in a request's bytes is kept as a view of them (all copied or gathered out)."""
        return all(
            not isinstance(item, Piece) or item.rows > 0 or len(self.blocks[item.block].plan.runs) > 1
            for item in inside
        )

    def _has_rows(self, inside: Sequence[Wanted]) -> bool:
        """Whether a request holds a chunk of a block's rows (read alone into a scratch buffer)."""
        return any(isinstance(item, Piece) and item.rows > 0 for item in inside)

    def _viewed(self, item: Wanted) -> bool:
        """A run that is its block's buffer as received."""
        if not isinstance(item, Piece):
            return False
        block = self.blocks[item.block]
        return len(block.plan.runs) == 1 and (not block.gathered or row_major(block.plan))
