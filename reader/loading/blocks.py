"""A rank's blocks of sharded tensors read: the executor of `blockrequests.py`'s requests.

`blockplan.py` (pure) cuts the blocks and chooses how each is read; `blockrequests.py` (pure) plans
the requests: at which data offset, grouped how, into which buffer. Here the link is timed where the
choice needs it (`sources/transport/speed.py`, once a source), the requests run up to `REQUESTS_AT_ONCE` at a
time, each big one in parallel parts by the source, what lands is put in place, and what the local
headers say is reported back: a prediction a header refutes is planned again by the planner.

A dim-0 block of a dense row-major tensor is one run: exactly its bytes are read, into one buffer with
the other dim-0 blocks (huge pages, faulted in on a thread), and the block is a view of them.

Each entry's data offset comes from its local header (`entries/offsets.py` keeps it). When the open's
own entries lie where torch's writer puts data, every block's requests start at once at the predicted
offsets, in the same requests as the headers where they lie close (the header and block of rank 0, the
block of the last rank and the next header), and count only once the header confirms the offset (else
they are read again: never wrong bytes). Remotely the small whole tensors (biases, norms:
`SMALL_WHOLE`) come in the same requests as the headers beside them.

Over HTTP, where the server answers several ranges a request (`serves_multiple_ranges`, nginx), those
requests are the ranges of up to `REQUESTS_AT_ONCE` multi-range requests, and a column block the plan
reads as parts comes as the parts of multi-range requests, straight into its buffer. A column block
read as rows (everywhere else, and over multi-range HTTP where the rows cost less) is read a chunk of
rows at a time into reused scratch buffers, one range a request, and gathered into its place as each
chunk lands (`rowchunks.py`): what a rank holds is its share, not the rows.

A block is not its whole entry, so no CRC-32 covers it: its bytes are length-checked and read
from the version opened (SourceChanged otherwise). A cut that spans its whole dim (world size 1,
say) is no block: that tensor is loaded whole, CRC-checked. A DEFLATE entry is inflated whole
(CRC-checked) and its block copied out of it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np

from .. import zipfmt
from ..entries.fetcher import EntryFetcher
from ..entries.offsets import DataOffsets
from ..errors import IntegrityError
from ..pt2.slicing import gather_into
from ..sources import ByteSource
from ..sources.spans import COALESCE_GAP
from ..sources.transport import speed
from ..tasks import task_group
from ..zipfmt import ZipEntry
from ..zipfmt.structs import METHOD_STORED
from .blockplan import (
    Block,
    Link,
    Piece,
    Region,
    RunsPart,
    Wanted,
    item_end,
    needs_timing,
    plan_blocks,
    probe,
    row_major,
    spread_over,
)
from .blockrequests import Into, Reads, Request, RequestPlanner
from .prefault import prefaulting
from .rowchunks import SCRATCH_AT_ONCE, SCRATCH_BYTES, Scratch, gather_rows
from .storages import aligned_empty

# Requests in flight at once (each big one in parallel parts of its own): as many as a load's parallel
# parts, so a rank opens no more connections than a whole load (a new one costs a round trip or more).
REQUESTS_AT_ONCE = 8

Buffers = dict[str, np.ndarray]
Landed = Callable[[Buffers], None]


def _finished(block: Block, laid: np.ndarray) -> np.ndarray:
    """The block's buffer once its runs are in `laid`: `laid` itself, or the block gathered out of it."""
    plan = block.plan
    if not block.gathered or row_major(plan):
        return laid
    out = np.empty(plan.nbytes, dtype=np.uint8)
    gather_into(laid, plan, out)
    return out


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
    by name) lets the data offsets of an archive torch wrote be predicted
    (`DataOffsets.written_as_torch_does`)."""
    multiple = len(blocks) > 1 and await source.serves_multiple_ranges()
    link = _link(source, multiple)
    if needs_timing(blocks, link):  # a column block's parts or its rows: the link timed once a source
        where = probe(blocks)
        assert where is not None
        parts = where.parts if link.part_cost is None else ()  # (a part's cost configured: the rate alone)
        timed = await speed.time_link(source, where.start, where.end, parts)
        link = _link(source, multiple, timed)
    chosen = plan_blocks(blocks, link)
    planner = RequestPlanner(chosen.blocks(blocks), chosen.parts, SCRATCH_BYTES)
    offsets = fetcher.offsets
    reads = _BlockReads(source, fetcher, planner, landed)
    await reads.run(planner.first(offsets, offsets.written_as_torch_does(entries), nearby, multiple))
    if reads.missing:  # cannot happen unless the bookkeeping above is broken
        raise AssertionError(f"blocks {sorted(reads.missing)} did not come in")
    return reads.buffers


def _link(source: ByteSource, multiple: bool, timed: speed.LinkSpeed | None = None) -> Link:
    """What the planner knows of `source`: a part's cost as configured, else as timed."""
    timed = timed or speed.measured(source)
    configured = source.part_cost
    if timed is None:
        return Link(multiple, None, configured)
    return Link(multiple, timed.rate, timed.part_cost if configured is None else configured)


class Span(NamedTuple):
    """A request sent as one range of a multi-range request, and the buffer its bytes go to."""

    start: int
    end: int
    request: Request
    held: np.ndarray


class _BlockReads:
    """The executor of a `RequestPlanner`'s reads: sends them, lands the bytes, and reports what the
    local headers say (`located`: a prediction refuted is planned again by the planner).

    A run read at a predicted offset counts once its header confirms the offset; one that refutes it
    drops the block's buffer (what lands later at the wrong offset is dropped too). A block of one run
    is a view of the bytes its request received; one of several runs gets a buffer of its own (runs
    copied in, or received into it as parts); one read in row chunks is gathered into its slice of
    `gathered` as each chunk lands from a reused scratch buffer. A whole entry is copied out."""

    def __init__(
        self, source: ByteSource, fetcher: EntryFetcher, planner: RequestPlanner, landed: Landed
    ) -> None:
        self.source, self.fetcher, self.planner, self.landed = source, fetcher, planner, landed
        self.blocks = planner.blocks
        self.offsets = fetcher.offsets
        self.scratch = Scratch(SCRATCH_BYTES, SCRATCH_AT_ONCE)
        self.gathered = aligned_empty(planner.gathered, 0)  # the blocks read in row chunks
        self.assumed: dict[str, int] = {}  # predicted, until the entry's local header is read
        self.tentative: dict[str, list[tuple[int, int]]] = {}  # (block, runs) in at an unconfirmed offset
        self.buffers: Buffers = {}
        self.missing: dict[str, int] = {}  # runs still to come in right, by block key
        self.twins: dict[int, list[int]] = {}  # blocks with the same runs as this one (tied names)
        self.gate = asyncio.Semaphore(REQUESTS_AT_ONCE)
        self.group: asyncio.TaskGroup | None = None
        done: Buffers = {}
        for index, block in enumerate(self.blocks):
            if block.plan.zeros or not block.plan.runs:
                done[block.key] = self.buffers[block.key] = np.zeros(block.info.storage.nbytes, np.uint8)
            else:
                self.missing[block.key] = planner.count(index)
        landed(done)

    async def run(self, reads: Reads) -> None:
        """The first reads and all that follows from them (the first failure cancels the rest)."""
        arena = aligned_empty(reads.arena, 0)  # faulted in on a thread while the bytes come in
        async with prefaulting(arena), prefaulting(self.gathered), task_group() as group:
            self.group = group
            for index, block in enumerate(self.blocks):
                if block.key in self.missing and block.entry.method != METHOD_STORED:
                    group.create_task(self.inflated(index))
            self.send(reads, arena)

    def send(self, reads: Reads, arena: np.ndarray | None = None) -> None:
        """Tasks for `reads`: a few multi-range requests of about the same bytes for the requests whose
        bytes are kept (`reads.multi_range`), the others one a request, then the parts."""
        assert self.group is not None
        self.assumed.update(reads.predicted)
        for index, twins in reads.parts.twins.items():
            self.twins[index] = list(dict.fromkeys([*self.twins.get(index, ()), *twins]))
        spans = [
            Span(request.start, request.end, request, self._held(request, arena))
            for request in reads.requests
            if reads.multi_range and request.into is not Into.SCRATCH
        ]
        if spans:
            self.group.create_task(self.spans_requests(spans))
        for request in reads.requests:
            if not reads.multi_range or request.into is Into.SCRATCH:
                self.group.create_task(self.request(request, arena))
        for batch in reads.parts.batches:
            self.group.create_task(self.ranges_request(batch))
        for request in reads.apart:
            self.group.create_task(self.request(request))

    def _held(self, request: Request, arena: np.ndarray | None) -> np.ndarray:
        """Where a request's bytes go, but for a scratch buffer: its slot of the arena, or its own."""
        if request.into is Into.ARENA:
            assert arena is not None
            return arena[request.slot : request.slot + request.end - request.start]
        return aligned_empty(request.end - request.start, request.start)

    async def request(self, request: Request, arena: np.ndarray | None = None) -> None:
        """One request's bytes into where the plan puts them (a scratch buffer given back once what
        lies in it is used up), then what lies in them (`received`)."""
        async with self.gate:
            inside = self._live(request.inside)
            if not inside:  # runs at a prediction refuted while they waited: read again elsewhere
                return
            if request.into is Into.SCRATCH:
                async with self.scratch.lent(request.end - request.start) as lent:
                    await self.source.read_into(request.start, memoryview(lent))
                    await self.received(request.start, inside, lent)
                return
            held = self._held(request, arena)
            await self.source.read_into(request.start, memoryview(held))
        await self.received(request.start, inside, held)

    async def ranges_request(self, parts: tuple[RunsPart, ...]) -> None:
        """One multi-range request for the runs of blocks (`RunsPart`s), each run straight into its place
        in its block's buffer."""
        async with self.gate:
            parts = tuple(part for part in parts if not self._refuted(part.block, part.offset))
            if not parts:  # runs at a prediction refuted while they waited: read again elsewhere
                return
            ranges = [rng for part in parts for rng in part.ranges(self.blocks[part.block].plan)]
            # each block's runs of this request lie end to end in its buffer
            into = [memoryview(self.own(part.block))[part.at : part.at + part.length] for part in parts]
            await self.source.read_ranges_into(ranges, into, fallback_gap=COALESCE_GAP)
        for part in parts:
            self.arrived_runs(part.block, part.high - part.low, part.offset)

    async def spans_requests(self, spans: list[Span]) -> None:
        """The spans as up to REQUESTS_AT_ONCE multi-range requests of about the same bytes. Where the
        source keeps to one connection when it is fast (`HttpOptions.fast_connection`), a few small
        spans (`speed.probe_spans`) are sent first, alone, and timed (unless the link was timed already:
        `speed.measured`): at least that fast, the rest go as few requests as their Range headers
        allow; otherwise as the eight."""
        fast, known = self.source.fast_connection, speed.measured(self.source)
        if fast is not None and known is None and len(spans) > 1:
            probe = speed.probe_spans(spans, self.source.part_size)
            began = time.monotonic()
            await self.spans_request(probe)
            known = speed.LinkSpeed(speed.rate(sum(span.end - span.start for span in probe), began))
            speed.remember(self.source, known)
            probed = {id(span) for span in probe}
            spans = [span for span in spans if id(span) not in probed]
        fastest = fast is not None and known is not None and known.rate >= fast
        async with task_group() as group:
            for share in spread_over(spans, 1 if fastest else REQUESTS_AT_ONCE) if spans else []:
                group.create_task(self.spans_request(share))

    async def spans_request(self, spans: list[Span]) -> None:
        """Several requests' spans as the ranges of one multi-range request, then what lies in each."""
        async with self.gate:
            live = [(span, inside) for span in spans if (inside := self._live(span.request.inside))]
            if not live:
                return
            ranges = [(span.start, span.end) for span, _ in live]
            await self.source.read_ranges_into(ranges, [memoryview(span.held) for span, _ in live])
        for span, inside in live:
            await self.received(span.start, inside, span.held)

    def _live(self, inside: tuple[Wanted, ...]) -> list[Wanted]:
        """`inside` without the runs read at an offset their entry's header has refuted."""
        return [
            item
            for item in inside
            if not isinstance(item, Piece) or not self._refuted(item.block, item.offset)
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
                self.arrived(item, held[item.start - start : item_end(item) - start])

    def _refuted(self, index: int, offset: int) -> bool:
        """Runs of block `index` read at `offset`, which its entry's header has refuted."""
        confirmed = self.offsets.known(self.blocks[index].entry.name)
        return confirmed is not None and confirmed != offset

    async def located(self, entry: ZipEntry, window: np.ndarray) -> None:
        """`entry`'s data offset from its local header in `window` (a second read for a header longer
        than guessed): the runs read at a prediction it confirms count; else what came in at the wrong
        offset goes and the planner plans the runs at the offset found."""
        name = entry.name
        offset = zipfmt.locate_data(entry, memoryview(window))
        if isinstance(offset, zipfmt.NeedUntil):
            offset = await self.fetcher.data_offset(entry)
        assumed = self.assumed.pop(name, None)
        if assumed is None:
            self.offsets.confirm(name, offset)
        elif self.offsets.settle(entry, offset):
            for index, count in self.tentative.pop(name, []):
                self.accepted(index, count)
            return
        self.tentative.pop(name, None)
        if assumed is not None:  # mispredicted: what came in at the wrong offset goes
            for index in self.planner.by_entry[name]:
                block = self.blocks[index]
                self.buffers.pop(block.key, None)
                self.missing[block.key] = self.planner.count(index)
        self.send(self.planner.at_offset(name, offset))

    def arrived(self, piece: Piece, data: np.ndarray) -> None:
        """A run's bytes are in `data`: in the block's buffer unless read at a refuted offset."""
        if self._refuted(piece.block, piece.offset):
            return
        block = self.blocks[piece.block]
        if piece.rows:
            chunks = self.planner.chunks[piece.block]
            rows = self.own(piece.block)[piece.at : piece.at + piece.rows * chunks.row_bytes]
            gather_rows(block.plan, chunks, data, rows)
        elif len(block.plan.runs) == 1:
            self.buffers[block.key] = data  # a view: the block, or what it is gathered from
        else:
            self.own(piece.block)[piece.at : piece.at + piece.length] = data
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
            place = self.planner.places.get(index)
            if place is not None:
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
        if index not in self.planner.chunks:  # (row chunks are gathered as they land)
            self.buffers[block.key] = _finished(block, self.buffers[block.key])
        self.landed({block.key: self.buffers[block.key]})

    async def inflated(self, index: int) -> None:
        block = self.blocks[index]
        async with self.gate:
            whole = np.frombuffer(await self.fetcher.read(block.entry), dtype=np.uint8)  # CRC-checked
        _lay_runs(whole, block.plan.runs, self.own(index))
        self.finished(index)


def _lay_runs(whole: np.ndarray, runs: tuple[tuple[int, int], ...], buffer: np.ndarray) -> None:
    """Runs [low, high) of `whole` end to end into `buffer`."""
    at = 0
    for low, high in runs:
        buffer[at : at + high - low] = whole[low:high]
        at += high - low


def _whole(entry: ZipEntry, window: np.ndarray, offsets: DataOffsets) -> np.ndarray:
    """A whole stored entry out of archive bytes from its local header, CRC-checked."""
    found = zipfmt.locate_data(entry, memoryview(window), entry.size)
    if isinstance(found, zipfmt.NeedUntil):
        raise IntegrityError(f"entry {entry.name!r}: its data runs past its region")
    offsets.confirm(entry.name, found)
    data = window[found - entry.header_offset : found - entry.header_offset + entry.size]
    zipfmt.verify_crc(entry, zipfmt.crc32(memoryview(data)))
    return data.copy()
