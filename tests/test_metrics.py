"""The service's Prometheus metrics under a real server: the active streams gauge counts bodies in flight."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from testing.faultserver import FaultServer, StallAfter
from testing.service import make_app, real_server
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator


async def test_active_streams_gauge_counts_bodies_in_flight(tmp_path) -> None:
    path = tmp_path / "big.pt2"
    write_pt2(path, {"big": (7, [4 << 20], bytes(16 << 20))})
    gauge = re.compile(r"^pt2serve_active_streams (\S+)$", re.M)
    async with FaultServer() as upstream:
        upstream.put("/big.pt2", path.read_bytes())
        app = make_app([f"big={upstream.url('/big.pt2')}"], chunk_size=64 << 10)
        async with real_server(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:

            async def active() -> str:
                return gauge.search((await client.get("/metrics")).text).group(1)

            assert await active() == "0.0"
            upstream.faults.append(StallAfter(1 << 20, path="/big.pt2", times=None))  # bodies stay in flight
            async with client.stream("GET", "/tensors/big/data") as streaming:
                await anext(streaming.aiter_raw())
                assert await active() == "1.0"
            for _ in range(250):  # the server notices the disconnect
                if await active() == "0.0":
                    break
                await asyncio.sleep(0.02)
            assert await active() == "0.0"
