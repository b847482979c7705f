"""loading/landing.py's checks without a server: a big entry checked on the worker, spans landing in
any order checked in the archive's order (remote reads: test_remote_integrity.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import reader
from reader.entries import running_crc

BIG = 18 << 20  # several running_crc.BATCHes: the worker checks most of it

pytestmark = pytest.mark.unit


def test_the_big_entry_is_checked_on_the_worker() -> None:
    assert BIG >= 4 * running_crc.BATCH


@pytest.mark.parametrize("order", ["in order", "reversed", "interleaved"])
async def test_spans_landing_in_any_order_are_checked_in_the_archives_order(order: str) -> None:
    from reader import zipfmt
    from reader.entries.running_crc import InOrder, RunningCrc

    data = np.random.default_rng(7).integers(0, 256, 5 * running_crc.BATCH + 123, dtype=np.uint8)
    base = 1000  # archive offset of the buffer's first byte
    cuts = [*range(0, len(data), 700_001), len(data)]
    spans = [(base + low, high - low) for low, high in itertools.pairwise(cuts)]
    if order == "reversed":
        spans.reverse()
    elif order == "interleaved":
        spans = spans[1::2] + spans[::2]
    for crc, outcome in ((zipfmt.crc32(data), None), (zipfmt.crc32(data) ^ 1, reader.IntegrityError)):
        entry = zipfmt.ZipEntry("x", b"x", 0, 0, crc, len(data), len(data), 0, 0, "stored")
        running = RunningCrc(entry)
        landed = InOrder(running, memoryview(data), base)
        for at, nbytes in spans:
            landed(at, nbytes)
        if outcome is None:
            await running.verify()
        else:
            with pytest.raises(outcome, match="CRC-32"):
                await running.verify()
