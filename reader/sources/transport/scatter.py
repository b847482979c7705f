"""Bytes laid across several buffers in order, and runs of one buffer gathered into others (sans-IO).

A multi-range answer whose layout is known before its body comes (multirange.layout) is received
straight into where its pieces go: each part's head into a frame checked afterwards, each part's
bytes into the caller's memory. `Scatter` is the cursor over those buffers that the socket reads
fill one after another.

An answer of short parts (a column block's runs: a piece of every row) comes whole into one buffer
instead (a socket read a part would cost more than the copy), and `gather` copies its parts out:
runs of one size at one step apart (a block's runs, its heads between them alike) as one strided
copy, so the copy costs a few calls a block rather than a few a part.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided


class Scatter:
    """Buffers filled one after another: `free()` is the unfilled rest of the current one."""

    def __init__(self, views: Iterable[memoryview]) -> None:
        self.views = [view for view in views if len(view)]
        self.size = sum(len(view) for view in self.views)
        self.filled = 0  # bytes written in all
        self.index = 0  # the buffer being filled
        self.at = 0  # bytes of it filled

    def free(self) -> memoryview:
        """What is left of the current buffer (empty once all are full)."""
        if self.index == len(self.views):
            return memoryview(b"")
        return self.views[self.index][self.at :]

    def advance(self, nbytes: int) -> None:
        """`nbytes` more were written where `free()` pointed (and on into the next buffers)."""
        if nbytes > self.size - self.filled:
            raise ValueError(f"{nbytes} bytes past the end of {self.size} bytes of buffers")
        self.filled += nbytes
        while nbytes:
            step = min(nbytes, len(self.views[self.index]) - self.at)
            self.at += step
            nbytes -= step
            if self.at == len(self.views[self.index]):
                self.index, self.at = self.index + 1, 0

    def write(self, data: bytes | memoryview) -> None:
        """Copy `data` in where the next bytes go."""
        data = memoryview(data).cast("B")
        if len(data) > self.size - self.filled:
            raise ValueError(f"{len(data)} bytes past the end of {self.size} bytes of buffers")
        while data:
            free = self.free()
            step = min(len(data), len(free))
            free[:step] = data[:step]
            self.advance(step)
            data = data[step:]


def gather(source: np.ndarray, starts: np.ndarray, sizes: np.ndarray, into: Sequence[memoryview]) -> None:
    """`source[starts[i] : starts[i] + sizes[i]]` for each i, end to end across the buffers of `into`,
    each of which holds whole runs (one, or several in a row); ValueError otherwise."""
    outs = [np.frombuffer(buffer, np.uint8) for buffer in into]
    if len(starts) and (starts.min() < 0 or (starts + sizes).max() > len(source)):
        raise ValueError(f"runs outside the {len(source)} bytes they are gathered from")
    ends = np.cumsum(sizes)
    bounds = np.cumsum([len(out) for out in outs])
    total = int(ends[-1]) if len(ends) else 0
    at_ends = np.searchsorted(ends, bounds[:-1])  # each buffer boundary must be a run's end
    inside = at_ends < len(ends)
    if (bounds[-1] if len(bounds) else 0) != total or not (
        inside.all() and (ends[at_ends] == bounds[:-1]).all()
    ):
        raise ValueError(f"runs of {total} bytes in all for buffers of {[len(out) for out in outs]} bytes")
    firsts = at_ends + 1  # the run each later buffer starts with
    breaks = np.zeros(len(starts), bool)
    breaks[:1] = True
    breaks[1:] |= sizes[1:] != sizes[:-1]
    steps = np.diff(starts)
    breaks[2:] |= steps[1:] != steps[:-1]
    breaks[firsts[firsts < len(starts)]] = True
    groups = np.flatnonzero(breaks).tolist()
    buffer, at = 0, 0
    for first, last in zip(groups, [*groups[1:], len(starts)]):
        count, size, start = last - first, int(sizes[first]), int(starts[first])
        if not size:
            continue
        while at == len(outs[buffer]):  # this buffer is full: the next one
            buffer, at = buffer + 1, 0
        out = outs[buffer][at : at + count * size]
        if count == 1:
            out[:] = source[start : start + size]
        else:
            step = int(starts[first + 1]) - start
            rows = as_strided(source[start:], shape=(count, size), strides=(step, 1), writeable=False)
            out.reshape(count, size)[...] = rows
        at += count * size
