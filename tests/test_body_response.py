"""BodyResponse, the service's streamed body: its headers are set before it is sent, and its
background task runs."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.routing import Route

from app.responses import BodyResponse
from reader.formats.body import BytesBody

pytestmark = pytest.mark.unit


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
