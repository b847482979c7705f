"""The service under a real uvicorn on loopback: streaming, disconnects, concurrency, upstream faults."""

from __future__ import annotations

import asyncio
import os
import random

import httpx
import pytest

import reader
from testing.faultserver import DropAfter, FaultServer
from testing.paths import ARCHIVES
from testing.service import make_app, real_server
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator

BIG = 24 << 20  # bytes in the big tensor


@pytest.fixture(scope="module")
def big_archive(tmp_path_factory):
    path = tmp_path_factory.mktemp("live") / "big.pt2"
    payload = os.urandom(BIG)
    write_pt2(path, {"big": (7, [BIG // 4], payload), "small": (7, [4, 4], os.urandom(64))})
    return path, payload


async def test_stream_range_and_head_over_a_real_server(big_archive) -> None:
    path, payload = big_archive
    app = make_app([f"big={path}"])
    async with real_server(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        whole = await client.get("/tensors/big/data")
        assert whole.status_code == 200 and whole.content == payload
        ranged = await client.get("/tensors/big/data", headers={"Range": "bytes=1000000-9999999"})
        assert ranged.status_code == 206 and ranged.content == payload[1_000_000:10_000_000]
        head = await client.head("/tensors/big/data")
        assert head.headers["content-length"] == str(BIG) and head.content == b""
        etag = whole.headers["etag"]
        assert (await client.get("/tensors/big/data", headers={"If-None-Match": etag})).status_code == 304


async def test_client_disconnect_stops_the_upstream_read(big_archive) -> None:
    path, _ = big_archive
    app = make_app([f"big={path}"], chunk_size=64 << 10)
    async with real_server(app) as url:
        archive = await _archive(app)
        before = archive.stats.get("data", {}).get("bytes", 0)
        async with (
            httpx.AsyncClient(base_url=url, timeout=30) as client,
            client.stream("GET", "/tensors/big/data") as response,
        ):
            async for _ in response.aiter_raw(64 << 10):
                break  # read a little, then hang up
        await asyncio.sleep(0.5)
        read = archive.stats["data"]["bytes"] - before
        assert read < BIG / 2, f"kept reading {read} bytes after the client left"
        assert app.state.limiter.active == 0  # the stream slot was given back


async def _archive(app) -> reader.Archive:
    for _ in range(100):
        slot = app.state.registry.slots["big"]
        if slot.archive is not None:
            return slot.archive
        await asyncio.sleep(0.05)
    raise AssertionError("archive did not open")


async def test_64_concurrent_clients_get_exact_bytes() -> None:
    app = make_app([f"many={ARCHIVES / 'many.pt2'}", f"layouts={ARCHIVES / 'layouts.pt2'}"])
    async with reader.open_archive(ARCHIVES / "many.pt2") as local:
        names = [t.name for t in local.tensors()]
        expected = {name: await local.read(name) for name in names}
    rng = random.Random(7)
    async with real_server(app) as url:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:

            async def worker(count: int) -> int:
                for _ in range(count):
                    name = rng.choice(names)
                    response = await client.get(f"/archives/many/tensors/{name}/data")
                    assert response.status_code == 200
                    assert response.content == expected[name]
                    assert int(response.headers["content-length"]) == len(response.content)
                return count

            done = await asyncio.gather(*(worker(20) for _ in range(64)))
    assert sum(done) == 64 * 20


async def test_upstream_failure_after_headers_aborts_the_response(big_archive) -> None:
    """A remote archive whose server cuts every body: the client must see a short body, not a 200
    completed with wrong or missing bytes."""
    path, payload = big_archive
    async with FaultServer() as upstream:
        upstream.put("/big.pt2", path.read_bytes())
        app = make_app([f"remote={upstream.url('/big.pt2')}"])
        async with real_server(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            assert (await client.get("/tensors/small/data")).status_code == 200
            # 1 MiB per request: more attempts than any one 8 MiB part may take (each has its own 5)
            upstream.faults.append(DropAfter(1 << 20, times=None))
            with pytest.raises(httpx.RemoteProtocolError):
                async with client.stream("GET", "/tensors/big/data") as response:
                    assert response.status_code == 200
                    received = b""
                    async for chunk in response.aiter_raw():
                        received += chunk
            assert len(received) < len(payload)
            assert payload.startswith(received)  # what did arrive was right


async def test_changed_remote_archive_is_reopened(big_archive) -> None:
    path, _ = big_archive
    async with FaultServer() as upstream:
        upstream.put("/a.pt2", (ARCHIVES / "many.pt2").read_bytes())  # bigger than the open's tail read
        app = make_app([f"remote={upstream.url('/a.pt2')}"])
        async with real_server(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            assert "params.0" in {t["name"] for t in (await client.get("/tensors")).json()["tensors"]}
            upstream.put("/a.pt2", path.read_bytes())  # replaced: new ETag
            # the read sees the new ETag before any byte went out: reopened, and the unversioned URL
            # is answered again from the new archive, which has no such tensor (no 503: app/errors.py)
            changed = await client.get("/tensors/params.0/data")
            assert changed.status_code == 404 and changed.json()["error"]["code"] == "tensor_not_found"
            names = {t["name"] for t in (await client.get("/tensors")).json()["tensors"]}
            assert names == {"big", "small"}
