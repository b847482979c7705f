"""How fast one connection to a source is, and what a part of a multi-range answer costs: timed once,
remembered per source.

Two choices turn on it. `parallel.py` keeps a big read on one connection when its first part, timed
alone, arrives at `fast_connection` or faster. `loading/blockplan.py` weighs reading a column block's
rows (more bytes, no parts) against its runs as the parts of multi-range requests (fewer bytes, client
CPU a part): the faster the link against the parts, the sooner the rows win. On loopback both are
bound by the same CPU, so both are timed together (`time_link`), under the load of the moment; what
was seen is kept (`remember`, `measured`), so a sharded load times its connection once.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..base import ByteSource

# How much of a first read is timed before deciding (one connection or several; parts or rows).
PROBE_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class LinkSpeed:
    """Bytes a second one connection carries, and the seconds a part of a multi-range answer costs
    beyond its bytes (None: not timed)."""

    rate: float
    part_cost: float | None = None


_measured: weakref.WeakKeyDictionary[object, LinkSpeed] = weakref.WeakKeyDictionary()


def rate(nbytes: int, began: float) -> float:
    """Bytes per second of `nbytes` received since `began` (time.monotonic()), a read timed alone."""
    return nbytes / max(time.monotonic() - began, 1e-6)


def remember(source: object, speed: LinkSpeed) -> None:
    """Keep what reads timed alone saw of `source`'s connection (the latest wins)."""
    with contextlib.suppress(TypeError):  # a source that cannot be weakly referenced is timed again
        _measured[source] = speed


def measured(source: object) -> LinkSpeed | None:
    """What one connection to `source` was seen to do, or None if never timed."""
    try:
        return _measured.get(source)
    except TypeError:
        return None


async def time_link(source: ByteSource, start: int, end: int, parts: Sequence[tuple[int, int]]) -> LinkSpeed:
    """Time `source`, one request at a time, the bytes dropped: one byte at `start` twice (the round
    trip), a quarter of [start, min(end, start + PROBE_BYTES)) twice (the rate, the round trip taken
    off), the faster of each counting (a busy host's stalls are not the link's), and, where given,
    `parts` (sorted, disjoint) as one multi-range request (a part's cost: the round trip and the bytes
    taken off, over the parts). Remembered for `source`."""
    quarter = max(1, (min(end, start + PROBE_BYTES) - start) // 4)
    trip = min([await _timed(source, [(start, start + 1)]) for _ in range(2)])
    took = min([await _timed(source, [(start, start + quarter)]) for _ in range(2)])
    seen = LinkSpeed(quarter / max(took - trip, took / 2, 1e-6))  # (at most half the time is the trip)
    if parts:
        nbytes = sum(high - low for low, high in parts)
        took = await _timed(source, parts)
        seen = LinkSpeed(seen.rate, max(took - trip - nbytes / seen.rate, 0.0) / len(parts))
    remember(source, seen)
    return seen


async def _timed(source: ByteSource, ranges: Sequence[tuple[int, int]]) -> float:
    """Seconds to read `ranges` into a buffer faulted in first (the pages' cost is not the link's)."""
    held = np.empty(sum(high - low for low, high in ranges), np.uint8)
    held[::4096] = 0
    began = time.monotonic()
    if len(ranges) == 1:
        await source.read_into(ranges[0][0], memoryview(held))
    else:
        await source.read_ranges_into(ranges, [memoryview(held)])
    return time.monotonic() - began


def probe_spans(spans: list, longest: int) -> list:
    """Spans (start, end, ...) to time a connection with: in order, none longer than `longest`, until
    PROBE_BYTES are in them; or the first span."""
    probe, size = [], 0
    for span in spans:
        if span[1] - span[0] <= longest:
            probe.append(span)
            size += span[1] - span[0]
            if size >= PROBE_BYTES:
                break
    return probe or spans[:1]
