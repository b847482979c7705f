"""`HttpSource.read_into` of big ranges: the body received straight into the caller's buffer (http1's
`BodyStream.receive_into`, through sources/transport/body.py), as parts into their slices (parallel.py's
`parts_into`), keeping every contract of `read`: exact bytes, If-Match pinning, a cut body resumed
at its first missing byte, 5xx retried, SourceChanged on a replaced object, nothing left running
when the caller is cancelled. Two part sizes, BULK_MIN and 64 KiB: read_into lands the body in place
for both."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

import reader
from reader.sources import HttpOptions, HttpSource
from reader.sources.transport.parallel import split
from testing.faultserver import ChangeObject, Drip, DropAfter, FaultServer, Status
from testing.faultserver import data_ranges as _ranges

pytestmark = pytest.mark.emulator

BULK_MIN = 1 << 20  # a range this long is worth parts over several connections

SIZES = {"bulk": BULK_MIN, "short": 64 << 10}
DATA = os.urandom(5 * BULK_MIN + 4321)


@pytest.fixture(params=sorted(SIZES))
def part(request) -> int:
    return SIZES[request.param]


@pytest.fixture
async def server():
    async with FaultServer(objects={"/blob": DATA}) as server:
        yield server


def _options(part: int, **changes) -> HttpOptions:
    knobs = dict(part_size=part, parallel_parts=3, parallel_above=0, fast_connection=None, backoff_base=0.01)
    return HttpOptions(**{**knobs, **changes})


async def _read_into(source: HttpSource, start: int, end: int) -> bytes:
    buffer = np.empty(end - start, dtype=np.uint8)
    await source.read_into(start, memoryview(buffer))
    return buffer.tobytes()


async def test_parts_land_in_their_slices_pinned_and_exact(server, part) -> None:
    source = await HttpSource.open(server.url("/blob"), tail_size=1024, options=_options(part))
    try:
        start, end = 77, len(DATA) - 5
        assert await _read_into(source, start, end) == DATA[start:end]
        assert sorted(_ranges(server)) == [
            (start + low, start + high) for low, high in split(0, end - start, part)
        ]
        assert all(r.headers.get("if-match") == server.etag("/blob") for r in server.requests("/blob")[1:])
        assert len({r.connection for r in server.requests("/blob")}) > 1
        assert source.stats.by_purpose["data"].bytes == end - start
    finally:
        await source.close()


@pytest.mark.parametrize("rst", [False, True])
async def test_a_part_cut_mid_body_resumes_at_its_first_missing_byte(server, part, rst) -> None:
    cut_at = part // 2 + 123
    server.faults.append(DropAfter(cut_at, rst=rst, after=2, path="/blob", method="GET"))
    source = await HttpSource.open(server.url("/blob"), tail_size=1024, options=_options(part))
    try:
        assert await _read_into(source, 0, len(DATA)) == DATA
        cut = next(r for r in server.requests("/blob") if r.fault == "DropAfter")
        low, high = (int(x) for x in cut.range.split("=")[1].split("-"))
        again = [r for r in _ranges(server) if r[1] == high + 1 and r != (low, high + 1)]
        if rst:  # a reset may discard bytes the kernel held: it resumes from what did land
            assert len(again) == 1 and low <= again[0][0] <= low + cut_at
        else:  # only the rest of that part, again
            assert again == [(low + cut_at, high + 1)]
    finally:
        await source.close()


async def test_one_body_cut_mid_way_resumes_exactly(server) -> None:
    # one connection, no parts: a 5 MiB body into the buffer in place, cut twice
    server.faults += [DropAfter(1_500_001, times=2, after=1, path="/blob", method="GET")]
    options = HttpOptions(parallel_parts=1, backoff_base=0.01)
    source = await HttpSource.open(server.url("/blob"), tail_size=1024, options=options)
    try:
        assert await _read_into(source, 10, len(DATA)) == DATA[10:]
        assert _ranges(server) == [(10, len(DATA)), (1_500_011, len(DATA)), (3_000_012, len(DATA))]
    finally:
        await source.close()


async def test_a_part_answering_5xx_is_retried_alone(server, part) -> None:
    server.faults.append(Status(503, after=2, times=2, path="/blob", method="GET"))
    source = await HttpSource.open(server.url("/blob"), tail_size=1024, options=_options(part))
    try:
        assert await _read_into(source, 0, len(DATA)) == DATA
        assert len([r for r in server.requests("/blob") if r.status == 503]) == 2
        assert len(_ranges(server)) == len(split(0, len(DATA), part)) + 2
    finally:
        await source.close()


async def test_an_object_replaced_between_parts_is_source_changed(server, part) -> None:
    server.faults.append(ChangeObject(os.urandom(len(DATA)), after=3, path="/blob", method="GET"))
    source = await HttpSource.open(server.url("/blob"), tail_size=1024, options=_options(part))
    try:
        with pytest.raises(reader.SourceChanged):
            await _read_into(source, 0, len(DATA))
        assert any(r.status == 412 for r in server.requests("/blob"))
    finally:
        await source.close()


async def test_a_fast_first_part_keeps_the_rest_on_one_connection(server) -> None:
    part = SIZES["bulk"]
    source = await HttpSource.open(
        server.url("/blob"), tail_size=1024, options=_options(part, fast_connection=0.0)
    )
    try:
        assert await _read_into(source, 0, len(DATA)) == DATA
        assert _ranges(server) == [(0, part), (part, len(DATA))]
    finally:
        await source.close()


async def test_a_cancelled_read_leaves_no_task_and_no_connection(server, part) -> None:
    server.faults.append(
        Drip(chunk_size=4096, interval=0.02, times=None, path="/blob", method="GET", after=1)
    )
    source = await HttpSource.open(server.url("/blob"), tail_size=1024, options=_options(part))
    tasks_before = asyncio.all_tasks()
    try:
        reading = asyncio.create_task(_read_into(source, 0, len(DATA)))
        for _ in range(200):  # until every part has its connection
            if server.open_connections >= 3:
                break
            await asyncio.sleep(0.01)
        assert server.open_connections >= 3
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        assert asyncio.all_tasks() - tasks_before - set(server._tasks) == set()
        for _ in range(100):  # the server sees every cut connection close (the open's too: a part took it)
            if server.open_connections == 0:
                break
            await asyncio.sleep(0.02)
        assert server.open_connections == 0
    finally:
        await source.close()
    for _ in range(100):
        if server.open_connections == 0:
            break
        await asyncio.sleep(0.02)
    assert server.open_connections == 0


async def test_a_chunked_body_is_copied_in_exactly(server) -> None:
    from testing.faultserver import Chunked

    server.faults.append(Chunked(chunk_size=100_000, after=1, path="/blob", method="GET"))
    source = await HttpSource.open(server.url("/blob"), tail_size=1024, options=HttpOptions(parallel_parts=1))
    try:
        assert await _read_into(source, 3, len(DATA) - 3) == DATA[3:-3]
    finally:
        await source.close()
