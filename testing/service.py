"""Test helpers for the service: an app over fixture archives, in process or under a real uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence

import httpx
import uvicorn
from fastapi import FastAPI

from app.main import create_app
from app.protocol import HTTP_PROTOCOL
from app.settings import Settings, parse_archive_specs
from testing import checks
from testing.paths import ARCHIVES

DEFAULT_SPECS = [
    f"layouts={ARCHIVES / 'layouts.pt2'}",
    f"dtypes={ARCHIVES / 'dtypes.pt2'}",
    f"two={ARCHIVES / 'two_models.pt2'}",
    f"pickled={ARCHIVES / 'pickled.pt2'}",
    f"deflate={ARCHIVES / 'many_deflate.pt2'}",
]

# the layouts fixture alone, as a --archive spec
LAYOUTS = f"layouts={ARCHIVES / 'layouts.pt2'}"


def make_app(specs: Sequence[str] = DEFAULT_SPECS, **settings: object) -> FastAPI:
    options = {"revalidate_seconds": 0, **settings}
    return create_app(Settings(archives=parse_archive_specs(specs), **options))  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def in_process(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client calling the app in process (ASGI transport runs no lifespan: we do)."""
    await app.state.registry.start()
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield client
    finally:
        await app.state.registry.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.asynccontextmanager
async def real_server(app: FastAPI) -> AsyncIterator[str]:
    """The app under a real uvicorn (uvloop + httptools, as `pt2serve serve` runs it) on loopback, in
    a thread; yields its URL.

    Waits asynchronously, so servers running on the caller's loop (upstreams) keep answering.
    Idle connections are kept a minute (uvicorn closes them after 5 s): a pooled connection that
    sat idle while a busy host ran other tests would be closed as the client reuses it."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", loop="uvloop",
                            http=HTTP_PROTOCOL, lifespan="on", timeout_keep_alive=60)  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(1000):
        if server.started or not thread.is_alive():
            break
        await asyncio.sleep(0.01)
    if not server.started:
        server.should_exit = True
        raise RuntimeError("uvicorn did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.to_thread(thread.join, 10)


@contextlib.contextmanager
def threaded_server(app: FastAPI) -> Iterator[str]:
    """The app under uvicorn on loopback in a thread of its own, for synchronous callers (the browser
    tests drive Chromium synchronously); yields its URL and stops it on exit."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=free_port(), log_level="warning", lifespan="on", http=HTTP_PROTOCOL
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{config.port}"
    finally:
        server.should_exit = True
        thread.join(10)


def run(coro, timeout: float = 60.0):
    """testing.checks.run with the longer bound a service round trip may need."""
    return checks.run(coro, timeout)


TRACEBACK = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\", line \d+")


def assert_json_error(response: httpx.Response, status: int | None = None) -> dict:
    """The error contract: a 4xx/5xx, JSON `{"error": {"code", "message"}}`, no traceback."""
    assert 400 <= response.status_code < 600, (response.status_code, response.text[:200])
    if status is not None:
        assert response.status_code == status, (response.status_code, response.text[:300])
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert isinstance(body["error"]["code"], str) and isinstance(body["error"]["message"], str)
    assert not TRACEBACK.search(response.text), response.text[:500]
    return body["error"]
