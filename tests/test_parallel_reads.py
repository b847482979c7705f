"""Parallel ranged GETs against real servers: the fault-injection server, nginx (with and without a
per-connection rate cap) and SeaweedFS. Parts are small here so a few MiB make many parts."""

from __future__ import annotations

import asyncio
import os

import pytest

import reader
from reader.sources import HttpOptions, HttpSource, S3Settings
from reader.sources.transport.parallel import split
from testing.faultserver import ChangeObject, Drip, DropAfter, FaultServer, Status
from testing.faultserver import data_ranges as _ranges
from testing.seaweed import SeaweedS3
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator

PART = 64 << 10
SIZE = 20 * PART + 1234  # 21 parts, the last one short
PARALLEL = HttpOptions(
    part_size=PART, parallel_parts=4, parallel_above=0, fast_connection=None, backoff_base=0.01
)
DATA = os.urandom(SIZE)


@pytest.fixture
async def server():
    async with FaultServer(objects={"/blob": DATA}) as server:
        yield server


async def _collect(source: HttpSource, start: int, end: int) -> list[bytes]:
    return [chunk async for chunk in source.stream(start, end, chunk_size=PART)]


async def test_a_big_read_is_parts_over_several_connections_in_order(server) -> None:
    source = await HttpSource.open(server.url("/blob"), tail_size=1024, options=PARALLEL)
    try:
        assert await source.read(0, SIZE) == DATA
        assert sorted(_ranges(server)) == split(0, SIZE, PART)
        assert all(r.headers.get("if-match") == server.etag("/blob") for r in server.requests("/blob")[1:])
        assert len({r.connection for r in server.requests("/blob")}) > 1
        assert source.stats.by_purpose["data"].requests == len(split(0, SIZE, PART))
        middle = b"".join(await _collect(source, 1000, SIZE - 1000))
        assert middle == DATA[1000 : SIZE - 1000]
    finally:
        await source.close()


async def test_a_read_at_or_below_the_threshold_is_one_request(server) -> None:
    options = HttpOptions(part_size=PART, parallel_parts=4, parallel_above=SIZE)
    source = await HttpSource.open(server.url("/blob"), tail_size=1024, options=options)
    try:
        assert await source.read(0, SIZE) == DATA
        assert _ranges(server) == [(0, SIZE)]
    finally:
        await source.close()


async def test_a_part_cut_mid_body_resumes_from_its_next_byte(server) -> None:
    # the 4th GET (the open is the 1st) is cut after 1000 bytes of its body
    server.faults.append(DropAfter(1000, after=3, path="/blob", method="GET"))
    source = await HttpSource.open(server.url("/blob"), tail_size=1024, options=PARALLEL)
    try:
        assert await source.read(0, SIZE) == DATA
        cut = next(r for r in server.requests("/blob") if r.fault == "DropAfter")
        start = int(cut.range.split("=")[1].split("-")[0])
        assert (start + 1000, start + PART) in _ranges(server)  # only the rest of that part again
    finally:
        await source.close()


async def test_a_part_answering_5xx_is_retried_alone(server) -> None:
    server.faults.append(Status(503, after=4, times=2, path="/blob", method="GET"))
    source = await HttpSource.open(server.url("/blob"), tail_size=1024, options=PARALLEL)
    try:
        assert await source.read(0, SIZE) == DATA
        failed = [r for r in server.requests("/blob") if r.status == 503]
        assert len(failed) == 2
        assert len(_ranges(server)) == len(split(0, SIZE, PART)) + 2
    finally:
        await source.close()


async def test_an_object_replaced_between_parts_raises_and_never_mixes_versions(server) -> None:
    replacement = os.urandom(SIZE)
    server.faults.append(ChangeObject(replacement, after=3, path="/blob", method="GET"))
    source = await HttpSource.open(server.url("/blob"), tail_size=1024, options=PARALLEL)
    received = bytearray()
    try:
        with pytest.raises(reader.SourceChanged):
            async for chunk in source.stream(0, SIZE, chunk_size=PART):
                received += chunk
        assert DATA.startswith(received)  # every byte handed out is the old version's
        assert len(received) < SIZE
        assert any(r.status == 412 for r in server.requests("/blob"))
    finally:
        await source.close()


async def test_a_consumer_that_stops_early_leaves_no_task_and_no_connection(server) -> None:
    # every part drips (a part takes seconds), so all of them are mid-body when the consumer leaves
    server.faults.append(
        Drip(chunk_size=1024, interval=0.02, times=None, path="/blob", method="GET", after=1)
    )
    source = await HttpSource.open(server.url("/blob"), tail_size=1024, options=PARALLEL)
    tasks_before = asyncio.all_tasks()
    try:
        chunks = source.stream(0, SIZE, chunk_size=PART)
        first = await anext(chunks)
        assert first == DATA[: len(first)]
        for _ in range(100):  # until every part has its connection (the first reuses the open's)
            if server.open_connections >= PARALLEL.parallel_parts:
                break
            await asyncio.sleep(0.01)
        assert server.open_connections == PARALLEL.parallel_parts
        await chunks.aclose()
        assert asyncio.all_tasks() - tasks_before - set(server._tasks) == set()
        for _ in range(100):  # the server sees every cut connection close
            if server.open_connections == 0:
                break
            await asyncio.sleep(0.02)
        assert server.open_connections == 0
    finally:
        await source.close()


async def test_a_whole_tensor_read_in_parts_passes_its_crc(tmp_path, server) -> None:
    payload = os.urandom(16 * PART)
    write_pt2(tmp_path / "big.pt2", {"w": (7, [len(payload) // 4], payload)})
    server.put("/big.pt2", (tmp_path / "big.pt2").read_bytes())
    async with reader.open_archive(server.url("/big.pt2"), tail_size=4096, http_options=PARALLEL) as ar:
        assert await ar.read("w") == payload
        assert (
            b"".join([bytes(c) async for c in ar.tensor("w").chunks(start=5, end=len(payload) - 5)])
            == (payload[5:-5])
        )


# -- nginx: uncapped (fast: the probe keeps one connection) and capped per connection (fan out) --


@pytest.fixture(scope="module")
def nginx_root(tmp_path_factory):
    from testing.servers import ensure_nginx

    ensure_nginx()  # installed when missing, not skipped
    root = tmp_path_factory.mktemp("nginx")
    (root / "blob").write_bytes(DATA)
    return root


def _nginx(root, **kwargs):
    from testing.servers import NginxProcess

    return NginxProcess(root, **kwargs)


async def test_nginx_uncapped_reads_are_exact(nginx_root) -> None:
    with _nginx(nginx_root) as nginx:
        for options in (PARALLEL, HttpOptions(part_size=PART, parallel_above=0)):
            source = await HttpSource.open(nginx.url("blob"), tail_size=1024, options=options)
            try:
                assert await source.read(7, SIZE - 7) == DATA[7 : SIZE - 7]
            finally:
                await source.close()


async def test_nginx_capped_per_connection_fans_out_after_the_probe(nginx_root) -> None:
    # 4 MiB/s per connection: the first part's first bytes arrive far below fast_connection
    options = HttpOptions(part_size=PART, parallel_parts=4, parallel_above=0)
    with _nginx(nginx_root, limit_rate="4m") as nginx:
        source = await HttpSource.open(nginx.url("blob"), tail_size=1024, options=options)
        try:
            nginx.take_log()
            assert await source.read(0, SIZE) == DATA
            ranges = [r["range"] for r in nginx.take_log()]
            assert len(ranges) == len(split(0, SIZE, PART))
        finally:
            await source.close()


async def test_s3_parallel_parts_are_signed_and_exact(seaweed_s3: SeaweedS3, tmp_path) -> None:
    (tmp_path / "blob").write_bytes(DATA)
    seaweed_s3.upload(seaweed_s3.private_bucket, "parallel/blob", tmp_path / "blob")
    settings = S3Settings(
        region=seaweed_s3.region,
        endpoint=seaweed_s3.endpoint,
        access_key=seaweed_s3.access_key,
        secret_key=seaweed_s3.secret_key,
    )
    from reader.sources.s3 import open_s3

    source = await open_s3(
        f"s3://{seaweed_s3.private_bucket}/parallel/blob", tail_size=1024, options=PARALLEL, settings=settings
    )
    try:
        assert await source.read(0, SIZE) == DATA
        assert source.stats.by_purpose["data"].requests == len(split(0, SIZE, PART))
    finally:
        await source.close()


async def test_a_fast_first_part_keeps_the_rest_on_one_connection(server) -> None:
    # fast_connection=0: any rate counts as fast, so after the probed first part comes one request
    options = HttpOptions(part_size=PART, parallel_parts=4, parallel_above=0, fast_connection=0.0)
    source = await HttpSource.open(server.url("/blob"), tail_size=1024, options=options)
    try:
        assert await source.read(0, SIZE) == DATA
        assert _ranges(server) == [(0, PART), (PART, SIZE)]
    finally:
        await source.close()
