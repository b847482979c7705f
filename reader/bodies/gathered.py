"""A gathered view's bytes, a piece at a time: what a tensor or a slice streams when its output is
not one run of its storage (a transposed read, a view with gaps, a broadcast, overlapping strides).

The output's declared size is a claim of the archive, so only the bytes asked for are built: the
requested byte range becomes a range of output elements, cut into boxes of at most `chunk_size`
bytes (`pt2.gather.element_boxes`), each built and handed on before the next. Where the boxes'
bytes come from depends on how many bytes lie behind the whole view:

- few (at most SPAN_IN_MEMORY, or no more than the bytes asked for, as a whole dense tensor read
  in another order; or a compressed entry, which is inflated from its start whatever is asked):
  read once, and each box copied out of them;
- many (a column of a large matrix, say): each box is planned as a slice of its own and reads
  only its runs, halved until they cover at most BOX_READ_MAX bytes.

A box of THREAD_GATHER_MIN bytes or more is copied on a worker thread (NumPy releases the GIL).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol

from .. import zipfmt
from ..entries.fetcher import EntryFetcher
from ..pt2.gather import box_elements, box_index, element_boxes, gather_box, split_box
from ..pt2.slicing import NormalizedEntry, SlicePlan, assemble, plan_slice
from ..pt2.tensorinfo import TensorInfo
from ..zipfmt import ZipEntry

SPAN_IN_MEMORY = 64 << 20  # bytes behind a view read whole and held while it streams
BOX_READ_MAX = 16 << 20  # otherwise, what one box's runs may cover
THREAD_GATHER_MIN = 256 << 10  # boxes from this size up are copied off the event loop

Behind = Callable[[], Awaitable[bytes | memoryview]]


class Viewed(Protocol):
    """A tensor over its payload (TensorBytes; named by shape: tensor.py imports this module)."""

    info: TensorInfo
    entry: ZipEntry

    @property
    def fetcher(self) -> EntryFetcher: ...


class Gathered:
    """The row-major output of `full[normalized]` of `tensor`, streamed in bounded memory.

    `whole` is the view as a plan over the bytes behind it laid end to end, which `behind()` reads
    (`behind_bytes` of them); its shape is the output's.
    """

    def __init__(
        self,
        tensor: Viewed,
        normalized: Sequence[NormalizedEntry],
        whole: SlicePlan,
        behind: Behind,
        behind_bytes: int,
    ) -> None:
        self.tensor = tensor
        self.normalized = tuple(normalized)
        self.whole = whole
        self._behind = behind
        self._behind_bytes = behind_bytes
        self._compressed = tensor.entry.method != zipfmt.structs.METHOD_STORED

    def in_memory(self, asked: int) -> bool:
        """Whether the bytes behind the view are read whole for `asked` bytes of output."""
        return self._compressed or self._behind_bytes <= max(SPAN_IN_MEMORY, asked)

    async def chunks(self, start: int, end: int, chunk_size: int) -> AsyncIterator[bytes | memoryview]:
        """Bytes [start, end) of the output, each chunk at most `chunk_size` bytes (or one element)."""
        if start >= end:
            return
        itemsize = self.whole.itemsize
        first, last = start // itemsize, -(-end // itemsize)
        skip, remaining = start - first * itemsize, end - start
        laid = await self._behind() if self.in_memory(end - start) else None
        for box in element_boxes(self.whole.shape, first, last, chunk_size // itemsize):
            if laid is not None:
                piece = await _off_loop(box_elements(box) * itemsize, gather_box, laid, self.whole, box)
            else:
                piece = await self._read_box(box)
            taken = memoryview(piece).cast("B")[skip : skip + remaining]
            skip, remaining = 0, remaining - len(taken)
            yield taken

    async def _read_box(self, box: tuple[range, ...]) -> bytes:
        """One box planned as a slice of its own: only its runs are read."""
        info = self.tensor.info
        plan = plan_slice(info, box_index(self.normalized, box))
        if plan.read_bytes > BOX_READ_MAX and box_elements(box) > 1:
            halves = split_box(box)
            return await self._read_box(halves[0]) + await self._read_box(halves[1])
        runs = await fetch_runs(self.tensor, plan.runs)
        return await _off_loop(plan.nbytes, assemble, plan, info, runs)


async def fetch_runs(tensor: Viewed, runs: Sequence[tuple[int, int]]) -> list[bytes | memoryview]:
    """The bytes of byte ranges of a tensor's payload, in order, each exactly its run's length."""
    entry, fetcher = tensor.entry, tensor.fetcher
    if not runs:
        return []
    if entry.method != zipfmt.structs.METHOD_STORED:
        # Compressed: one inflate from the entry's start through the last run, cut into runs.
        low, high = runs[0][0], runs[-1][1]
        data = memoryview(await fetcher.read(entry, low, high))
        return [data[start - low : end - low] for start, end in runs]
    # An unknown data offset is read_many's to find: the local header in the same request as runs
    # near it, or requested together with the runs at their predicted place (EntryFetcher).
    return list(await fetcher.read_many([(entry, start, end) for start, end in runs]))


async def zero_chunks(start: int, end: int, chunk_size: int) -> AsyncIterator[bytes]:
    """Bytes [start, end) of zeros, in chunks (a zero-byte payload's output, whatever its size)."""
    for at in range(start, end, max(1, chunk_size)):
        yield bytes(min(end, at + chunk_size) - at)


async def _off_loop(size: int, function: Callable, *args: object):  # type: ignore[no-untyped-def]
    """`function(*args)`, on a worker thread when it copies THREAD_GATHER_MIN bytes or more; else
    here, then a turn of the event loop (a gibibyte of small boxes from memory never waits on I/O)."""
    if size >= THREAD_GATHER_MIN:
        return await asyncio.to_thread(function, *args)
    result = function(*args)
    await asyncio.sleep(0)
    return result


__all__ = ["BOX_READ_MAX", "SPAN_IN_MEMORY", "Gathered", "fetch_runs", "zero_chunks"]
