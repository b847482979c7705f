"""Bugs a review of the service found, each pinned by a test that failed before its fix."""

from __future__ import annotations

import asyncio
import re
import shutil

import httpx
import pytest
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.routing import Route

from app.registry import Registry
from app.responses import BodyResponse
from app.settings import Settings, parse_archive_specs
from reader.formats.body import BytesBody
from testing.faultserver import FaultServer, StallAfter
from testing.paths import ARCHIVES
from testing.service import make_app, real_server
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator


async def test_a_late_failure_of_an_old_version_does_not_close_its_replacement(tmp_path) -> None:
    path = tmp_path / "a.pt2"
    shutil.copy(ARCHIVES / "layouts.pt2", path)
    registry = Registry(Settings(archives=parse_archive_specs([f"a={path}"]), revalidate_seconds=0))
    await registry.start()
    try:
        old = await registry.get("a")
        await registry.reopen("a", stale=old)  # the first request to see the change reopens
        new = await registry.get("a")
        assert new is not old
        await registry.reopen("a", stale=old)  # a late failure from a request still reading `old`
        assert await registry.get("a") is new
        assert len(await new.read("transposed")) == new.layout("transposed").nbytes  # still open
    finally:
        await registry.close()


def _body_app(background: BackgroundTask | None, seen: dict) -> Starlette:
    async def endpoint(request: Request) -> BodyResponse:
        response = BodyResponse(
            request,
            BytesBody(bytes(range(200))),
            etag='"e"',
            media_type="application/octet-stream",
            chunk_size=64,
            background=background,
        )
        seen["headers"] = dict(response.headers)
        return response

    return Starlette(routes=[Route("/body", endpoint, methods=["GET", "HEAD"])])


async def test_body_response_has_headers_and_runs_its_background_task() -> None:
    seen: dict = {}
    ran = asyncio.Event()

    async def background() -> None:
        ran.set()

    app = _body_app(BackgroundTask(background), seen)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        ranged = await client.get("/body", headers={"Range": "bytes=10-19"})
    assert ranged.status_code == 206 and ranged.content == bytes(range(10, 20))
    assert seen["headers"]["content-range"] == "bytes 10-19/200"
    assert seen["headers"]["content-length"] == "10" and seen["headers"]["etag"] == '"e"'
    assert dict(ranged.headers).items() >= {"content-range": "bytes 10-19/200", "etag": '"e"'}.items()
    assert ran.is_set()


async def test_an_internal_value_error_is_a_logged_500_not_the_clients_fault(caplog) -> None:
    app = make_app()

    async def broken() -> None:
        raise ValueError("a bug of ours")

    app.add_api_route("/broken", broken)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)  # as a server goes on
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/broken")
    assert response.status_code == 500
    assert response.json() == {
        "error": {"code": "internal_error", "message": "internal error (see the server log)"}
    }
    assert "a bug of ours" in caplog.text


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
