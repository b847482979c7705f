"""Check a range's entries while the rest of the range is still arriving.

A load receives a range into one buffer and then checks each stored entry's CRC-32 (and locates
its data after its local header). Done after the last byte, that check is a sizeable part of a
load from a fast store, on the critical path. A source that reports what
landed (`HttpSource.read_into(landed=...)`) lets the check follow the receive instead: each entry
whose whole region (local header, data, descriptor) is in is checked on a thread at once, so only
the last entries are left when the body ends.

Bytes land in order within a part, and parts may land in any order: `Arrivals` keeps the landed
spans and how far from the range's start every byte is in, and an entry is checked as soon as
its whole region is in, wherever it lies (what `iter_load` hands over as it lands).
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Sequence

import numpy as np

from ..zipfmt import ZipEntry

Check = Callable[[Sequence[ZipEntry]], dict[str, np.ndarray]]


class Arrivals:
    """The spans of [start, end) that landed; `prefix` is where the first gap begins."""

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.prefix = start
        self.end = end
        self._by_start: dict[int, int] = {}  # landed spans past the prefix: start -> end
        self._by_end: dict[int, int] = {}  # the same spans: end -> start

    def add(self, at: int, nbytes: int) -> tuple[int, int]:
        """Bytes [at, at + nbytes) landed: the landed span that holds them now."""
        if nbytes <= 0:
            return at, at
        low, high = at, at + nbytes
        before = self._by_end.pop(low, None)  # a span this one continues
        if before is not None:
            del self._by_start[before]
            low = before
        after = self._by_start.pop(high, None)  # a span that continues this one
        if after is not None:
            del self._by_end[after]
            high = after
        if low <= self.prefix:
            self.prefix = max(self.prefix, high)
            return self.start, self.prefix
        self._by_start[low], self._by_end[high] = high, low
        return low, high

    def covers(self, low: int, high: int) -> bool:
        """Whether bytes [low, high) have all landed."""
        if high <= self.prefix:
            return low >= self.start
        return any(start <= low and high <= end for start, end in self._by_start.items())

    def complete(self) -> None:
        """The read succeeded: every byte is in."""
        self.prefix = self.end
        self._by_start.clear()
        self._by_end.clear()


class Follower:
    """Runs `check` on a thread for each batch of `entries` whose regions have landed (wherever in
    the range: parts land in any order), while the receive goes on; `results` gathers what the
    checks return, and `checked` (when given) hears of each batch at once."""

    def __init__(
        self,
        entries: Sequence[ZipEntry],
        arrivals: Arrivals,
        check: Check,
        checked: Callable[[dict[str, np.ndarray]], None] | None = None,
    ) -> None:
        self.arrivals = arrivals
        self.results: dict[str, np.ndarray] = {}
        self._waiting = sorted(entries, key=lambda entry: entry.header_offset)
        self._offsets = [entry.header_offset for entry in self._waiting]
        self._check = check
        self._checked = checked
        self._wake = asyncio.Event()

    def landed(self, at: int, nbytes: int) -> None:
        low, high = self.arrivals.add(at, nbytes)
        # the first waiting entry that starts in the span is the only one it may have completed
        first = bisect.bisect_left(self._offsets, low)
        if first < len(self._waiting) and self._waiting[first].region_end <= high:
            self._wake.set()

    def complete(self) -> None:
        self.arrivals.complete()
        self._wake.set()

    async def run(self) -> None:
        """Until every entry is checked (the caller cancels it if the read fails)."""
        while self._waiting:
            await self._wake.wait()
            self._wake.clear()
            ready: list[ZipEntry] = []
            waiting: list[ZipEntry] = []
            for entry in self._waiting:
                landed = self.arrivals.covers(entry.header_offset, entry.region_end)
                (ready if landed else waiting).append(entry)
            if ready:
                self._waiting = waiting
                self._offsets = [entry.header_offset for entry in self._waiting]
                batch = await asyncio.to_thread(self._check, ready)
                self.results.update(batch)
                if self._checked is not None:
                    self._checked(batch)
