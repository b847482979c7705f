"""The hot layout/data routes (app/routes/hot.py) answer exactly as FastAPI's routes would, and hand
every request they cannot judge to FastAPI; what they keep per archive version is only what cannot
change; service settings and CLI options for parallel reads."""

from __future__ import annotations

import pytest

import reader.sources
from app.caching import CachePolicy
from app.cli import build_parser
from app.errors import ApiError
from app.routes.hot import HotLane, HotRoute
from app.settings import Settings
from testing.service import in_process, make_app

pytestmark = pytest.mark.unit


@pytest.fixture
async def client():
    async with in_process(make_app()) as client:
        yield client


def _hot(app) -> list[HotRoute]:
    return next(m.kwargs["routes"] for m in app.user_middleware if m.cls is HotLane)


def test_the_hot_lane_is_the_innermost_middleware_and_knows_the_query_parameters() -> None:
    app = make_app(api_token="secret", cors_origins=("https://viewer.example",))
    # metrics, CORS and the token check come first; only the caching policy (which the hot routes
    # apply themselves) is inside it
    assert [m.cls for m in app.user_middleware[-2:]] == [HotLane, CachePolicy]
    hot = _hot(app)
    assert {(route.path, method) for route in hot for method in route.methods} == {
        (f"{prefix}/tensors/{{name:path}}/{what}", method)
        for prefix in ("", "/archives/{archive_id}")
        for what, method in (("layout", "GET"), ("data", "GET"), ("data", "HEAD"))
    }
    data = next(route for route in hot if route.path.endswith("/data"))
    assert data.query["order"] == {"default", "contiguous"} and data.query["format"] == {"raw", "npy"}


QUERIES = ["", "?model=model", "?order=contiguous", "?format=npy", "?order=bogus", "?order=a&order=b", "?x=1"]
PATHS = ["/tensors/conv.weight/data", "/archives/layouts/tensors/conv.weight/layout",
         "/archives/layouts/tensors/no.such/layout", "/archives/nope/tensors/x/data"]  # fmt: skip


async def test_hot_and_fastapi_routes_answer_the_same(client) -> None:
    """The same requests through the hot routes and through FastAPI's own routes (hot routes removed)."""
    fastapi_only = make_app()
    fastapi_only.user_middleware = [m for m in fastapi_only.user_middleware if m.cls is not HotLane]
    async with in_process(fastapi_only) as plain:
        for path in PATHS:
            for query in QUERIES:
                ours, theirs = await client.get(path + query), await plain.get(path + query)
                assert (ours.status_code, ours.content) == (theirs.status_code, theirs.content), path + query
                for header in ("content-type", "content-length", "etag", "content-range"):
                    assert ours.headers.get(header) == theirs.headers.get(header)


async def test_hot_routes_serve_ranges_and_head_and_count_in_metrics(client) -> None:
    whole = await client.get("/tensors/conv.weight/data")
    part = await client.get("/tensors/conv.weight/data", headers={"Range": "bytes=4-11"})
    assert part.status_code == 206 and part.content == whole.content[4:12]
    head = await client.head("/tensors/conv.weight/data")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(len(whole.content))
    metrics = (await client.get("/metrics")).text
    assert 'route="/tensors/{name:path}/data"' in metrics


class _Failing:
    """A hot route whose answer fails with the app's own ApiError, before or after its start."""

    def __init__(self, after_start: bool) -> None:
        self.after_start = after_start

    async def handle(self, scope, receive, send) -> None:
        if self.after_start:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        raise ApiError(404, "not_found", "gone")


@pytest.mark.parametrize("after_start", [False, True])
async def test_hot_lane_errors_get_the_app_handlers_only_before_the_response_started(after_start) -> None:
    """Before: the app's handler answers (JSON 404). After: the error propagates, so the server aborts
    the connection; a second response start on the same request would be a protocol error."""
    app = make_app()
    lane = HotLane(app.router, service=app, routes=_hot(app))
    sent: list[dict] = []

    async def send(message) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {"type": "http", "method": "GET", "path": "/x", "headers": [], "query_string": b""}
    if after_start:
        with pytest.raises(ApiError):
            await lane.answer(_Failing(True), scope, receive, send)
        assert [m["type"] for m in sent] == ["http.response.start"]
    else:
        await lane.answer(_Failing(False), scope, receive, send)
        assert sent[0]["status"] == 404 and b'"not_found"' in sent[1]["body"]
    assert "hot_error" not in scope


def test_parallel_settings_from_the_environment() -> None:
    settings = Settings.from_environment(
        environ={"PT2SERVE_PARALLEL_PARTS": "2", "PT2SERVE_PART_SIZE": "1048576", "PT2SERVE_ACCESS_LOG": "1"}
    )
    assert (settings.parallel_parts, settings.part_size, settings.access_log) == (2, 1 << 20, True)
    defaults = Settings.from_environment(environ={})
    assert (defaults.parallel_parts, defaults.part_size, defaults.access_log) == (None, None, False)
    # unset: the library's defaults, the same for the service, the CLI and reader (one place)
    library = reader.sources.HttpOptions()
    served = make_app().state.registry._http_options
    assert (served.parallel_parts, served.part_size, served.parallel_above) == (
        library.parallel_parts,
        library.part_size,
        library.parallel_above,
    )
    get = build_parser().parse_args(["get", "x.pt2", "w", "-o", "out"])
    assert (get.parallel, get.part_size) == (None, None)
    app = make_app(parallel_parts=3, part_size=1 << 20)
    options = app.state.registry._http_options
    assert (options.parallel_parts, options.part_size) == (3, 1 << 20)


def test_cli_parallel_options() -> None:
    args = build_parser().parse_args(
        ["get", "x.pt2", "w", "-o", "out", "--parallel", "3", "--part-size", "65536"]
    )
    assert (args.parallel, args.part_size) == (3, 65536)
    serve = build_parser().parse_args(["serve"])
    assert (serve.parallel, serve.part_size, serve.access_log) == (None, None, None)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["get", "x.pt2", "w", "-o", "out", "--parallel", "0"])
