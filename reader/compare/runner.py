"""`compare(a, b)`: list the names, find moves, then run the plan's jobs and assemble the verdicts.

The jobs run in one `asyncio.TaskGroup`, at most CONCURRENT_TENSORS at a time (a semaphore taken
before each task is made, so 10,000 never exist at once); each returns its verdicts and the
comparison is assembled from them at the end. Large tensors take one of STREAMED_AT_ONCE stream
slots, each holding a few chunks, so memory is bounded whatever the archives' sizes. A pair of
amplified views (far more bytes declared than lie behind them) is proven the same by the storage
behind them, viewed alike, before anything costs the size they declare; else compared without the
stride-0 dims that only repeat, where that leaves them small.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..bodies.tensor import TensorBytes
from ..digests import THREAD_HASH_MIN, Digests, sha256_of, tensor_key
from ..pt2.dtypes import dtype_of
from ..pt2.gather import amplified, without_repeats
from ..pt2.tensorinfo import TensorInfo
from ..tasks import task_group
from .aligned import aligned
from .model import Comparison, TensorDiff
from .numerics import Figures, flat, fold
from .plan import (
    SAMPLE_ABOVE,
    Batch,
    Job,
    Listing,
    Move,
    Placement,
    Single,
    Undecided,
    crc_same,
    list_names,
    model_pairs,
    move_candidates,
    sample_starts,
    schedule,
    settle_moves,
)

if TYPE_CHECKING:
    from ..archives.archive_like import ArchiveLike

CHUNK_BYTES = 1 << 20  # the streamed pass's chunk
STREAMED_AT_ONCE = 2  # large tensors streamed at once (each holds a few chunks)
CONCURRENT_TENSORS = 4  # jobs (a tensor or a batch) run at once: remote reads overlap, memory is bounded
SAMPLE_READS_AT_ONCE = 8  # a sample's blocks read at once
Progress = Callable[[int, int], None]  # (bytes read so far, bytes the comparison expects to read)
Verdicts = list[tuple[int, TensorDiff]]  # (slot, verdict): what a job returns


async def compare(
    a: ArchiveLike,
    b: ArchiveLike,
    *,
    model_a: str | None = None,
    model_b: str | None = None,
    prefix: str | None = None,
    exact: bool = False,
    sample_above: int = SAMPLE_ABOVE,
    digests_a: Digests | None = None,
    digests_b: Digests | None = None,
    progress: Progress | None = None,
) -> Comparison:
    """Compare archive `a` (old) with `b` (new), by name, reading only what metadata cannot decide.
    Either may be an `Archive` or a `ShardedArchive` (any `reader.ArchiveLike`).

    `model_a`/`model_b`: the models compared (default: each archive's only or "model" model; when
    both archives hold the same several models and none is named, every model against its twin;
    `model_b` defaults to `model_a` when `b` has it). `prefix` keeps names starting with it.
    `exact`: no sampling, every undecided tensor in one full pass. `sample_above`: tensors larger
    than this (and than the sample) are compared on a sample first.
    `digests_a`/`digests_b`: the archives' digest caches (the service's), read and filled.
    `progress(done, total)` is called with bytes read as the comparison goes.
    """
    digests_a = digests_a or Digests(a)
    digests_b = digests_b or Digests(b)
    before = _data_bytes(a), _data_bytes(b)
    rows: list[TensorDiff | Undecided] = []
    for pair_a, pair_b in model_pairs(a, b, model_a, model_b):
        listing = list_names(a.tensors(model=pair_a), b.tensors(model=pair_b), prefix)
        rows.extend(settle_moves(listing, await _find_moves(listing, digests_a, digests_b)))
    undecided = [(slot, row) for slot, row in enumerate(rows) if isinstance(row, Undecided)]
    placements = {slot: _placement(a, b, pair) for slot, pair in undecided}
    jobs = schedule(undecided, placements, exact=exact, sample_above=sample_above)
    run = _Run(a, b, digests_a, digests_b, _Tracker(sum(2 * pair.nbytes for _, pair in undecided), progress))
    decided = dict(await _execute(jobs, run))
    tensors = tuple(decided[slot] if isinstance(row, Undecided) else row for slot, row in enumerate(rows))
    return Comparison(tensors, {"a": _data_bytes(a) - before[0], "b": _data_bytes(b) - before[1]})


async def _execute(jobs: Sequence[Job], run: _Run) -> Verdicts:
    """Every job in one task group, at most CONCURRENT_TENSORS at once; their verdicts together."""
    slots = asyncio.Semaphore(CONCURRENT_TENSORS)

    async def one(job: Job) -> Verdicts:
        try:
            return await (run.batch(job) if isinstance(job, Batch) else run.single(job))
        finally:
            slots.release()

    tasks: list[asyncio.Task[Verdicts]] = []
    async with task_group() as group:
        for job in jobs:
            await slots.acquire()
            tasks.append(group.create_task(one(job)))
    return [verdict for task in tasks for verdict in task.result()]


async def _find_moves(listing: Listing, digests_a: Digests, digests_b: Digests) -> dict[str, Move]:
    """Added name -> the removed tensor whose bytes it holds. Only tensors of the same dtype and
    shape are candidates; their CRC-32s first, digests read for those alone (in B's order, each
    removed tensor taken once)."""
    by_shape = move_candidates(listing.removed)
    found: dict[str, Move] = {}
    used: set[str] = set()
    for info_b in listing.added:
        candidates = [c for c in by_shape.get((info_b.dtype, info_b.sizes), ()) if c.name not in used]
        if not candidates or not info_b.readable:
            continue
        match = next((c for c in candidates if crc_same(c, info_b)), None)
        proof = "crc32"
        if match is None:
            proof = "sha256"
            match = await _matching(info_b, candidates, digests_a, digests_b)
        if match is not None:
            used.add(match.name)
            found[info_b.name] = Move(match, proof)
    return found


async def _matching(
    info_b: TensorInfo, candidates: Sequence[TensorInfo], digests_a: Digests, digests_b: Digests
) -> TensorInfo | None:
    """The candidate whose bytes `info_b` holds, by digest; an amplified view (its digest costs the
    size it declares) only by the storage behind it, viewed alike (`_storage_same`)."""
    if any(amplified(info) for info in (info_b, *candidates)):
        tensor_b = digests_b.archive.tensor(info_b.name, model=info_b.model, order="contiguous")
        for candidate in candidates:
            tensor_a = digests_a.archive.tensor(candidate.name, model=candidate.model, order="contiguous")
            if await _storage_same(tensor_a, tensor_b):
                return candidate
        return None
    want = await digests_b.tensor(info_b, "contiguous")
    for candidate in candidates:
        if await digests_a.tensor(candidate, "contiguous") == want:
            return candidate
    return None


async def _storage_same(tensor_a: TensorBytes, tensor_b: TensorBytes) -> bool:
    """Proven equal outputs at the cost of their storage: the same view (dtype, sizes, strides)
    over equal bytes (SHA-256 of the storage spans, streamed). False: not proven either way."""
    a, b = tensor_a.info, tensor_b.info
    if (a.dtype, a.sizes, a.strides) != (b.dtype, b.sizes, b.strides) or tensor_a.zeros != tensor_b.zeros:
        return False
    if tensor_a.span[1] - tensor_a.span[0] != tensor_b.span[1] - tensor_b.span[0]:
        return False
    digest_a, digest_b = await asyncio.gather(
        sha256_of(tensor_a.storage_chunks(CHUNK_BYTES)), sha256_of(tensor_b.storage_chunks(CHUNK_BYTES))
    )
    return digest_a == digest_b


def _placement(a: ArchiveLike, b: ArchiveLike, pair: Undecided) -> Placement:
    """Where the pair's payloads lie (a sharded checkpoint's tensors: in their shard's file)."""
    tensor_a, tensor_b = a.tensor(pair.a.name, model=pair.a.model), b.tensor(pair.b.name, model=pair.b.model)
    return Placement(
        id(tensor_a.fetcher), tensor_a.entry.header_offset, id(tensor_b.fetcher), tensor_b.entry.header_offset
    )


class _Run:
    """The jobs of one comparison: each reads what it needs and returns its verdicts."""

    def __init__(
        self, a: ArchiveLike, b: ArchiveLike, digests_a: Digests, digests_b: Digests, tracker: _Tracker
    ) -> None:
        self.a, self.b, self.digests_a, self.digests_b, self.tracker = a, b, digests_a, digests_b, tracker
        self.streams = asyncio.Semaphore(STREAMED_AT_ONCE)

    def _known(self, pair: Undecided) -> tuple[bytes | None, bytes | None]:
        return (
            self.digests_a.cached(tensor_key(pair.a, pair.order)),
            self.digests_b.cached(tensor_key(pair.b, pair.order)),
        )

    async def batch(self, job: Batch) -> Verdicts:
        """Small tensors: each side's bytes in one `read_many` (neighbouring payloads in one
        request), then digests and figures tensor by tensor. Known equal digests skip the read."""
        verdicts: Verdicts = []
        unread: list[tuple[int, Undecided]] = []
        for slot, pair in job.members:
            known_a, known_b = self._known(pair)
            if known_a is not None and known_a == known_b:
                verdicts.append((slot, _same(pair)))
            else:
                unread.append((slot, pair))
        if not unread:
            return verdicts
        first = unread[0][1]
        datas_a, datas_b = await asyncio.gather(
            self.a.read_many([p.a.name for _, p in unread], model=first.a.model, order=job.order),
            self.b.read_many([p.b.name for _, p in unread], model=first.b.model, order=job.order),
        )
        for slot, pair in unread:
            data_a, data_b = datas_a[pair.a.name], datas_b[pair.b.name]
            self.tracker.advance(len(data_a) + len(data_b))
            digest_a, digest_b = hashlib.sha256(data_a).digest(), hashlib.sha256(data_b).digest()
            self.digests_a.remember(tensor_key(pair.a, pair.order), digest_a)
            self.digests_b.remember(tensor_key(pair.b, pair.order), digest_b)
            if digest_a == digest_b:
                verdicts.append((slot, _same(pair)))
                continue
            dtype = _dtype(pair.a)
            verdicts.append((slot, _changed(pair, fold(Figures(), flat(data_a, dtype), flat(data_b, dtype)))))
        return verdicts

    async def single(self, job: Single) -> Verdicts:
        """One large tensor: a sample that differs decides `changed`; else one streamed pass takes
        the figures and (unless both digests are known) both digests."""
        pair = job.pair
        known_a, known_b = self._known(pair)
        if known_a is not None and known_a == known_b:
            return [(job.slot, _same(pair))]
        tensor_a = self.a.tensor(pair.a.name, model=pair.a.model, order=pair.order)
        tensor_b = self.b.tensor(pair.b.name, model=pair.b.model, order=pair.order)
        dtype = _dtype(pair.a)
        if (tensor_a.amplified or tensor_b.amplified) and await _storage_same(tensor_a, tensor_b):
            return [(job.slot, _same(pair))]  # their storage, not the size they declare, was read
        if job.sample:
            figures = await self._sampled(tensor_a, tensor_b, dtype)
            if figures.elements_differ:
                return [(job.slot, _changed(pair, figures))]
        if tensor_a.amplified or tensor_b.amplified:
            decided = await self._without_repeats(pair, tensor_a, tensor_b, dtype)
            if decided is not None:
                return [(job.slot, decided)]
        hashing = known_a is None or known_b is None  # both known (and unequal): the figures alone
        async with self.streams:
            figures, digest_a, digest_b = await self._streamed(tensor_a, tensor_b, dtype, hashing=hashing)
        if not hashing:
            return [(job.slot, _changed(pair, figures))]
        self.digests_a.remember(tensor_key(pair.a, pair.order), digest_a)
        self.digests_b.remember(tensor_key(pair.b, pair.order), digest_b)
        return [(job.slot, _same(pair) if digest_a == digest_b else _changed(pair, figures))]

    async def _streamed(
        self, tensor_a: TensorBytes, tensor_b: TensorBytes, dtype: Any, *, hashing: bool
    ) -> tuple[Figures, bytes, bytes]:
        """One pass over both tensors in aligned chunks: figures, and both SHA-256s when `hashing`.
        The next chunks are read while the current ones are folded in (on worker threads)."""
        figures = Figures()
        hashes = (hashlib.sha256(), hashlib.sha256())

        def hash_both(piece_a: memoryview, piece_b: memoryview) -> None:
            hashes[0].update(piece_a)
            hashes[1].update(piece_b)

        def folded(before: Figures, piece_a: memoryview, piece_b: memoryview) -> Figures:
            return fold(before, flat(piece_a, dtype), flat(piece_b, dtype))

        queue: asyncio.Queue[tuple[memoryview, memoryview] | None] = asyncio.Queue(maxsize=1)

        async def produce() -> None:
            async for pair in aligned(
                tensor_a.chunks(0, None, CHUNK_BYTES), tensor_b.chunks(0, None, CHUNK_BYTES), dtype.itemsize
            ):
                self.tracker.advance(2 * len(pair[0]))
                await queue.put(pair)
            await queue.put(None)

        async with task_group() as group:
            group.create_task(produce())
            while (pair := await queue.get()) is not None:
                if len(pair[0]) >= THREAD_HASH_MIN:  # hashing, figures: two threads (both release the GIL)
                    figuring = asyncio.to_thread(folded, figures, *pair)
                    if hashing:
                        _, figures = await asyncio.gather(asyncio.to_thread(hash_both, *pair), figuring)
                    else:
                        figures = await figuring
                else:
                    if hashing:
                        hash_both(*pair)
                    figures = folded(figures, *pair)
        return figures, hashes[0].digest(), hashes[1].digest()

    async def _without_repeats(
        self, pair: Undecided, tensor_a: TensorBytes, tensor_b: TensorBytes, dtype: Any
    ) -> TensorDiff | None:
        """Views of the same sizes and strides compared without their stride-0 dims, which only
        repeat (each element pair counted as often as it stands in the views); None where that
        leaves them amplified still (overlapping strides), or the views differ in layout."""
        a, b = tensor_a.info, tensor_b.info
        if (a.dtype, a.sizes, a.strides) != (b.dtype, b.sizes, b.strides):
            return None
        (reduced_a, times), (reduced_b, _) = without_repeats(a), without_repeats(b)
        if times == 1 or amplified(reduced_a):
            return None
        sides = [
            TensorBytes(reduced, tensor.entry, tensor.fetcher, "contiguous")
            for reduced, tensor in ((reduced_a, tensor_a), (reduced_b, tensor_b))
        ]
        async with self.streams:
            figures, digest_a, digest_b = await self._streamed(*sides, dtype, hashing=True)
        return _same(pair) if digest_a == digest_b else _changed(pair, figures.repeated(times))

    async def _sampled(self, tensor_a: TensorBytes, tensor_b: TensorBytes, dtype: Any) -> Figures:
        """Figures over the sample's blocks (plan.sample_starts) at the same offsets of both tensors."""
        starts, block = sample_starts(tensor_a.length, dtype.itemsize)
        limit = asyncio.Semaphore(SAMPLE_READS_AT_ONCE)

        async def both(start: int) -> tuple[bytes, bytes]:
            async with limit:
                pair = await asyncio.gather(
                    tensor_a.read_range(start, start + block), tensor_b.read_range(start, start + block)
                )
                self.tracker.advance(2 * block)
                return pair[0], pair[1]

        async with task_group() as group:
            reads = [group.create_task(both(start)) for start in starts]
        pairs = [read.result() for read in reads]
        sample_a, sample_b = b"".join(p[0] for p in pairs), b"".join(p[1] for p in pairs)
        return fold(Figures(sampled=True), flat(sample_a, dtype), flat(sample_b, dtype))


class _Tracker:
    """Bytes read so far, reported to the progress callback (the one count the jobs share)."""

    def __init__(self, total: int, progress: Progress | None) -> None:
        self.total, self.done, self.progress = total, 0, progress

    def advance(self, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.done, max(self.total, self.done))


def _same(pair: Undecided) -> TensorDiff:
    return TensorDiff(pair.name, "same", pair.a, pair.b, proof="sha256")


def _changed(pair: Undecided, figures: Figures) -> TensorDiff:
    return TensorDiff(pair.name, "changed", pair.a, pair.b, figures=figures)


def _dtype(info: TensorInfo) -> Any:
    return dtype_of(info.geometry.dtype)


def _data_bytes(archive: ArchiveLike) -> int:
    return archive.stats.get("data", {}).get("bytes", 0)
