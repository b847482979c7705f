"""One run of bytes laid across several buffers in order (sans-IO).

A multi-range answer whose layout is known before its body comes (multirange.layout) is received
straight into where its pieces go: each part's head into a frame checked afterwards, each part's
bytes into the caller's memory. `Scatter` is the cursor over those buffers that the socket reads
fill one after another.
"""

from __future__ import annotations

from collections.abc import Iterable


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

    def joined(self) -> bytes:
        """Everything written, in order, as one bytes."""
        out, left = [], self.filled
        for view in self.views:
            out.append(bytes(view[:left]))
            left -= len(out[-1])
            if not left:
                break
        return b"".join(out)
