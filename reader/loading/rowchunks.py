"""Column blocks read a chunk of rows at a time (sans-IO but for the buffers they land in).

Where a column block's runs cannot be asked for apart (S3, GCS, Azure, an HTTP server that answers one
range a request, a local file), a rank reads the rows they lie in: world_size times its share. Held
whole, those rows would make a rank's memory its share times world_size; read a chunk of whole rows at
a time into a few reused buffers (`Scratch`) and gathered into the block as each chunk lands
(`gather_rows`), they cost the share and the scratch.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import numpy as np

from ..pt2.slicing import SlicePlan, gather_into

# Requests whose bytes are used up as they arrive (column blocks gathered out of the rows they lie in,
# whole small entries copied out) are at most this long, and go to at most SCRATCH_AT_ONCE reused
# buffers: a rank reading its weights' whole rows backs its share and 64 MiB, not the rows (from S3,
# 16 MiB x 4 was faster than 8 MiB x 4: bench/README.md).
SCRATCH_BYTES = 16 << 20
SCRATCH_AT_ONCE = 4


@dataclass(frozen=True, slots=True)
class RowChunks:
    """A gathered block of one run read `rows` at a time, each chunk gathered into the block's buffer as
    it lands: from the run's start, row r's elements lie in [first + r * step, ... + span)."""

    first: int
    step: int
    span: int
    row_bytes: int  # a row of the gathered block
    rows: tuple[tuple[int, int], ...]  # [r0, r1) of each chunk


def row_chunks(plan: SlicePlan, limit: int) -> RowChunks | None:
    """`plan` (a gathered block of one run) as chunks of whole rows of at most `limit` bytes (a row
    longer than that alone); None where its rows are not apart in storage (an odd view)."""
    shape, strides = plan.shape, plan.strides
    if plan.zeros or len(plan.runs) != 1 or not shape or shape[0] < 2 or strides[0] <= 0:
        return None
    low = sum((size - 1) * stride for size, stride in zip(shape[1:], strides[1:]) if stride < 0)
    high = sum((size - 1) * stride for size, stride in zip(shape[1:], strides[1:]) if stride > 0)
    span = high - low + plan.itemsize
    if span > strides[0]:
        return None
    per = max(1, (limit - span) // strides[0] + 1)
    rows = tuple((row, min(row + per, shape[0])) for row in range(0, shape[0], per))
    return RowChunks(plan.offset + low, strides[0], span, plan.nbytes // shape[0], rows)


def gather_rows(plan: SlicePlan, chunks: RowChunks, data: np.ndarray, into: np.ndarray) -> None:
    """Rows of the block, row-major into `into` (whole rows), from `data`: the run's bytes from the
    first of those rows' `chunks.first` (a row's first element byte)."""
    gather_into(data, plan, into, len(into) // chunks.row_bytes, plan.offset - chunks.first)


class Scratch:
    """Up to `count` buffers of `size` bytes, lent to requests whose bytes are used up as they arrive
    and reused: what such requests hold at once is bounded, and backed once."""

    def __init__(self, size: int, count: int) -> None:
        self.size = size
        self.free: list[np.ndarray] = []
        self.gate = asyncio.Semaphore(count)

    @asynccontextmanager
    async def lent(self, nbytes: int) -> AsyncIterator[np.ndarray]:
        """`nbytes` of a scratch buffer (a buffer of its own where one piece is longer), until the
        block exits."""
        async with self.gate:
            buffer = self.free.pop() if self.free else np.empty(max(self.size, nbytes), np.uint8)
            try:
                yield buffer[:nbytes]
            finally:
                if len(buffer) == self.size:
                    self.free.append(buffer)
