"""A rank's blocks of sharded tensors read: the executor of `blockplan.py`'s plan.

`blockplan.py` (pure) cuts the blocks, chooses how each is read and groups what is wanted into
requests; here the link is timed where the choice needs it (`sources/transport/speed.py`, once a source), the
requests run up to `REQUESTS_AT_ONCE` at a time, each big one in parallel parts by the source, and
what lands is put in place.

A dim-0 block of a dense row-major tensor is one run: exactly its bytes are read, into one buffer with
the other dim-0 blocks (huge pages, faulted in on a thread), and the block is a view of them.

Each entry's data offset comes from its local header. torch's ZIP writer pads every local header
so that data starts at a multiple of 64 (`blockplan.predicted_offset`); when the open's own entries
lie where that rule puts them, every block's requests start at once at the predicted offsets, in the
same requests as the headers where they lie close (the header and block of rank 0, the block of the
last rank and the next header), and count only once the header confirms the offset (else they are read
again: never wrong bytes). Remotely the small whole tensors (biases, norms: `SMALL_WHOLE`) come in
the same requests as the headers beside them. GPT-2 at world 4 from S3: 55 requests for the first
and last ranks, 105 for the others (where the header and the block lie apart), against 62 for a
whole load.

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

import numpy as np

from .. import zipfmt
from ..entries.fetcher import EntryFetcher
from ..errors import IntegrityError
from ..pt2.slicing import gather_into
from ..sources import ByteSource
from ..sources.transport import speed
from ..tasks import task_group
from ..zipfmt import ZipEntry
from ..zipfmt.structs import METHOD_STORED
from .blockplan import (
    DATA_ALIGNMENT,
    REQUEST_GAP,
    Block,
    Link,
    Piece,
    Region,
    RunsPart,
    Wanted,
    group_requests,
    header_region,
    item_end,
    needs_timing,
    pieces_of,
    plan_blocks,
    predicted_offset,
    probe,
    row_major,
    runs_requests,
    spread_over,
    written_as_torch_does,
)
from .prefault import prefaulting
from .rowchunks import SCRATCH_AT_ONCE, SCRATCH_BYTES, RowChunks, Scratch, gather_rows, row_chunks
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
    by name) lets the data offsets of an archive torch wrote be predicted (`written_as_torch_does`)."""
    multiple = len(blocks) > 1 and await source.serves_multiple_ranges()
    link = _link(source, multiple)
    if needs_timing(blocks, link):  # a column block's parts or its rows: the link timed once a source
        where = probe(blocks)
        assert where is not None
        parts = where.parts if link.part_cost is None else ()  # (a part's cost configured: the rate alone)
        timed = await speed.time_link(source, where.start, where.end, parts)
        link = _link(source, multiple, timed)
    chosen = plan_blocks(blocks, link)
    finer = set(chosen.parts)
    blocks = chosen.blocks(blocks)
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
            elif reads.used_up(inside) and (not multiple or reads.has_rows(inside)):
                held = None  # a scratch buffer, taken when the request starts (rows: one range alone)
            else:
                held = aligned_empty(end - start, start)
            spans.append((start, end, inside, held))
        alone = [span for span in spans if span[3] is None] if multiple else spans
        if multiple:  # a few multi-range requests, each about as big, instead of one a span
            group.create_task(reads.spans_requests([span for span in spans if span[3] is not None]))
        for start, end, inside, held in alone:
            group.create_task(reads.request(start, end, inside, held))
        reads.launch_several(several)
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
                wanted.append(header_region(entry))
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
            low, high, group = inside[0].start, item_end(inside[0]), [inside[0]]
            for item in inside[1:]:  # in order of their starts
                if max(high, item_end(item)) - low > self.scratch.size:
                    cut.append((low, high, group))
                    low, high, group = item.start, item_end(item), []
                group.append(item)
                high = max(high, item_end(item))
            cut.append((low, high, group))
        return cut

    def used_up(self, inside: list[Wanted]) -> bool:
        """Whether nothing in a request's bytes is kept as a view of them (all copied or gathered out)."""
        return all(
            not isinstance(item, Piece) or item.rows > 0 or len(self.blocks[item.block].plan.runs) > 1
            for item in inside
        )

    def has_rows(self, inside: list[Wanted]) -> bool:
        """Whether a request holds a chunk of a block's rows (read alone into a scratch buffer)."""
        return any(isinstance(item, Piece) and item.rows > 0 for item in inside)

    def viewed(self, item: Wanted) -> bool:
        """A run that is its block's buffer as received."""
        if not isinstance(item, Piece):
            return False
        block = self.blocks[item.block]
        return len(block.plan.runs) == 1 and (not block.gathered or row_major(block.plan))

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
        """Multi-range requests for the runs of blocks read as parts (block, data offset)
        (`blockplan.runs_requests`): a tied name's block is a copy of the one read, one whose runs
        overlap another's is read apart."""
        assert self.group is not None
        planned = runs_requests(self.blocks, several)
        for index, twins in planned.twins.items():
            known = self.twins.setdefault(index, [])
            known += [twin for twin in twins if twin not in known]
        for batch in planned.batches:
            self.group.create_task(self.ranges_request(batch))
        apart = [piece for index, offset in planned.apart for piece in self._pieces_of(index, offset)]
        for start, end, inside in self.requests(apart):
            held = None if self.used_up(inside) else aligned_empty(end - start, start)
            self.group.create_task(self.request(start, end, inside, held))

    def _pieces_of(self, index: int, offset: int) -> list[Piece]:
        return pieces_of(index, self.blocks[index].plan, self.chunks.get(index), offset)

    async def ranges_request(self, parts: tuple[RunsPart, ...]) -> None:
        """One multi-range request for the runs of blocks (`RunsPart`s), each run straight into its place
        in its block's buffer."""
        async with self.gate:
            parts = tuple(part for part in parts if not self._refuted(part.block, part.offset))
            if not parts:  # runs at a prediction refuted while they waited: read again elsewhere
                return
            ranges: list[tuple[int, int]] = []
            into: list[memoryview] = []  # each block's runs of this request lie end to end in its buffer
            for part in parts:
                runs = self.blocks[part.block].plan.runs[part.low : part.high]
                ranges += [(part.offset + start, part.offset + end) for start, end in runs]
                length = sum(end - start for start, end in runs)
                into.append(memoryview(self.own(part.block))[part.at : part.at + length])
            await self.source.read_ranges_into(ranges, into, fallback_gap=REQUEST_GAP)
        for part in parts:
            self.arrived_runs(part.block, part.high - part.low, part.offset)

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
        spans (`speed.probe_spans`) are sent first, alone, and timed (unless the link was timed already:
        `speed.measured`): at least that fast, the rest go as few
        requests as their Range headers allow (faster from loopback nginx than eight at once:
        bench/README.md, `shard.py`); otherwise as the eight."""
        fast = self.source.fast_connection
        known = speed.measured(self.source)
        if fast is not None and known is not None and len(spans) > 1:  # timed already (blockplan's choice)
            shares = spread_over(spans, 1 if known.rate >= fast else REQUESTS_AT_ONCE)
        elif fast is not None and len(spans) > 1:
            probe = speed.probe_spans(spans, self.source.part_size)
            began = time.monotonic()
            await self.spans_request(probe)
            probed = {id(span) for span in probe}
            spans = [span for span in spans if id(span) not in probed]
            measured = speed.rate(sum(end - start for start, end, *_ in probe), began)
            speed.remember(self.source, speed.LinkSpeed(measured))
            shares = spread_over(spans, 1 if measured >= fast else REQUESTS_AT_ONCE) if spans else []
        else:
            shares = spread_over(spans, REQUESTS_AT_ONCE)
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
                self.arrived(item, held[item.start - start : item_end(item) - start])

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


def _whole(entry: ZipEntry, window: np.ndarray, known: dict[str, int]) -> np.ndarray:
    """A whole stored entry out of archive bytes from its local header, CRC-checked."""
    found = zipfmt.locate_data(entry, memoryview(window), entry.size)
    if isinstance(found, zipfmt.NeedUntil):
        raise IntegrityError(f"entry {entry.name!r}: its data runs past its region")
    known[entry.name] = found
    data = window[found - entry.header_offset : found - entry.header_offset + entry.size]
    zipfmt.verify_crc(entry, zipfmt.crc32(memoryview(data)))
    return data.copy()
