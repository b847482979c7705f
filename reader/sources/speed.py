"""How fast one connection to a source is: one timed read, remembered per source.

Two choices turn on it. `parallel.py` keeps a big read on one connection when its first part, timed
alone, arrives at `fast_connection` or faster. `loading/blockplan.py` weighs reading a column block's
rows (more bytes, no parts) against its runs as the parts of multi-range requests (fewer bytes, about
7 µs of client CPU a part): the faster the link, the sooner the rows win. Both time a read the same way
(`rate`, over at most `PROBE_BYTES`); what a source's read saw is kept (`remember`, `measured`), so a
sharded load times its connection once.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .base import ByteSource

# How much of a first read is timed before deciding (one connection or several; parts or rows).
PROBE_BYTES = 4 << 20

_measured: weakref.WeakKeyDictionary[object, float] = weakref.WeakKeyDictionary()


def rate(nbytes: int, began: float) -> float:
    """Bytes per second of `nbytes` received since `began` (time.monotonic()), a read timed alone."""
    return nbytes / max(time.monotonic() - began, 1e-6)


def remember(source: object, value: float) -> None:
    """Keep what a read timed alone saw of `source`'s connection (the latest wins)."""
    with contextlib.suppress(TypeError):  # a source that cannot be weakly referenced is timed again
        _measured[source] = value


def measured(source: object) -> float | None:
    """Bytes a second one connection to `source` was seen to carry, or None if never timed."""
    try:
        return _measured.get(source)
    except TypeError:
        return None


async def timed_read(source: ByteSource, start: int, end: int) -> float:
    """Archive bytes [start, min(end, start + PROBE_BYTES)) read alone (and dropped), timed: the rate,
    remembered for `source`."""
    end = min(end, start + PROBE_BYTES)
    buffer = np.empty(end - start, np.uint8)
    began = time.monotonic()
    await source.read_into(start, memoryview(buffer))
    value = rate(end - start, began)
    remember(source, value)
    return value


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
