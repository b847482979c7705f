"""`read_into` from remote sources: a tensor's bytes into the caller's buffer are exactly what `read`
and `read_range` give, with the same checks. Local files and memory are in test_read_into_rules.py."""

from __future__ import annotations

import numpy as np
import pytest

import reader
from reader.sources import HttpOptions
from testing.faultserver import FaultServer
from testing.paths import ARCHIVES
from testing.read_into_checks import agrees_with_read

pytestmark = pytest.mark.emulator


FAST = HttpOptions(backoff_base=0.01, backoff_cap=0.05, read_timeout=2.0, time_budget=10.0)


async def test_remote_reads_into_buffers_equal_read() -> None:
    async with FaultServer() as server:
        for name in ("layouts.pt2", "many_deflate.pt2"):
            server.put("/" + name, (ARCHIVES / name).read_bytes())
            async with reader.open_archive(server.url("/" + name), tail_size=4096, http_options=FAST) as ar:
                assert await agrees_with_read(ar) > 0
        assert not server.errors


@pytest.mark.parametrize("parts", [1, 4])
async def test_landed_hears_of_every_byte_once_across_parts_and_resumes(parts: int) -> None:
    """HttpSource.read_into(landed=...) reports spans that tile the range exactly, each after its
    bytes are in the buffer, also when a part is cut mid-body and resumed."""
    from testing.faultserver import DropAfter

    payload = np.random.default_rng(3).integers(0, 256, 6 << 20, dtype=np.uint8).tobytes()
    options = HttpOptions(
        parallel_parts=parts, part_size=1 << 20, parallel_above=1 << 20, fast_connection=None,
        backoff_base=0.01, backoff_cap=0.05, max_attempts=4,
    )  # fmt: skip
    async with FaultServer() as server:
        server.put("/blob", payload)
        source = await reader.sources.HttpSource.open(server.url("/blob"), tail_size=1024, options=options)
        try:
            server.faults.append(DropAfter(nbytes=300_000, after=parts // 2, method="GET"))
            buffer = np.zeros(len(payload) - 1000, dtype=np.uint8)
            spans: list[tuple[int, int]] = []

            def landed(at: int, nbytes: int) -> None:
                assert buffer[at - 500 : at - 500 + nbytes].tobytes() == payload[at : at + nbytes]
                spans.append((at, nbytes))

            await source.read_into(500, memoryview(buffer), landed=landed)
        finally:
            await source.close()
        assert server.faults[0].applied == 1
    assert buffer.tobytes() == payload[500:-500]
    covered = np.zeros(len(payload), dtype=np.int32)
    for at, nbytes in spans:
        covered[at : at + nbytes] += 1
    assert (covered[500:-500] == 1).all() and not covered[:500].any() and not covered[-500:].any()
