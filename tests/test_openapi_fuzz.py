"""Fuzz the service through its own OpenAPI schema (schemathesis) against a real uvicorn on loopback.

The API tester's own run (`schemathesis run`, with no configuration of ours and every check:
statuses, media types, headers and bodies as documented, invalid input refused, valid input
accepted, Allow on OPTIONS and unknown methods, and the stateful phase following the document's
links from /archives and the listings) must find nothing. Every operation in /openapi.json also
gets up to 30 generated requests (valid and invalid parameters, odd tensor names) checked here:
never a 5xx, every 4xx JSON `{"error": {"code", "message"}}`, Content-Length the body's. Two
deterministic sweeps go alongside: every tensor of the two archives through /data (each order,
format and method) and /layout, and hypothesis-generated Range, If-Range and If-None-Match
headers, which the schema names in its responses but not as parameters.
"""

from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

schemathesis = pytest.importorskip(
    "schemathesis",
    minversion="4.0",
    reason="schemathesis>=4 is not installed (pip install 'schemathesis>=4')",
)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

pytestmark = pytest.mark.emulator

ARCHIVES = pathlib.Path(__file__).resolve().parent / "fixtures" / "archives"
SPECS = [f"layouts={ARCHIVES / 'layouts.pt2'}", f"pickled={ARCHIVES / 'pickled.pt2'}"]
FUZZ_SETTINGS = settings(
    max_examples=10,  # per operation; the CLI run below covers every check and phase besides
    deadline=None,
    derandomize=True,  # the same requests every run: a failure here is reproducible
    suppress_health_check=list(HealthCheck),
)


class ThreadedServer:
    """The real app under uvicorn (uvloop + httptools, as `pt2serve serve` runs it), in a thread."""

    def __init__(self) -> None:
        import uvicorn

        from app.main import create_app
        from app.settings import Settings, parse_archive_specs

        app = create_app(Settings(archives=parse_archive_specs(SPECS), revalidate_seconds=0))
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        config = uvicorn.Config(app, loop="uvloop", http="httptools", log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> ThreadedServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.socket.close()


@pytest.fixture(scope="module")
def server():
    with ThreadedServer() as running:
        yield running


@pytest.fixture(scope="module")
def api_schema(server):
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


def test_schemathesis_with_no_configuration_finds_nothing(server, tmp_path):
    """`schemathesis run --checks all` over every phase (examples, coverage, fuzzing, stateful) with
    schemathesis' own defaults: no configuration of ours, so every expectation (which statuses a
    valid request may get, and the rest) is the tool's. Deterministic and kept to 10 cases an
    operation (tens of seconds)."""
    # an empty schemathesis.toml in the run's working directory: the tool looks there first, so no
    # file in a parent directory can configure it either
    (tmp_path / "schemathesis.toml").write_text("")
    command = [
        *(sys.executable, "-m", "schemathesis.cli"),
        *("run", f"{server.url}/openapi.json", "--checks", "all", "--max-examples", "10"),
        *("--generation-deterministic", "--workers", "2", "--no-color", "--request-timeout", "30"),
    ]
    # in tmp_path: the run keeps a cache (.schemathesis/) in its working directory
    run = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-6000:]
    assert "Stateful" in report and " passed" in report, report[-3000:]


def header(headers, name: str) -> str | None:
    """One header from httpx headers or schemathesis' `{name: [values]}`."""
    value = headers.get(name)
    return value[0] if isinstance(value, list) else value


def check_response(method: str, status: int, headers, body: bytes, what: str) -> None:
    """No 5xx; a 4xx is a JSON error object (HEAD: the same headers, no body)."""
    assert status < 500, f"{what} -> {status}: {body[:500]!r}"
    if status < 400:
        return
    content_type = header(headers, "content-type") or ""
    assert content_type.startswith("application/json"), (
        f"{what} -> {status} with content-type {content_type!r}"
    )
    if method == "HEAD":
        assert body == b"", f"{what} -> HEAD {status} with a body"
        return
    document = json.loads(body)
    assert set(document) == {"error"}, f"{what} -> {status}: {document}"
    error = document["error"]
    assert isinstance(error.get("code"), str) and error["code"], f"{what} -> {status}: {document}"
    assert isinstance(error.get("message"), str), f"{what} -> {status}: {document}"


@schema.parametrize()
@FUZZ_SETTINGS
def test_openapi_operations(case, server):
    response = case.call(base_url=server.url, timeout=30)
    what, body = case.as_curl_command(), response.content
    check_response(case.method.upper(), response.status_code, response.headers, body, what)
    length = header(response.headers, "content-length")
    encoded = header(response.headers, "content-encoding")  # Content-Length counts the encoded bytes
    if length is not None and case.method.upper() != "HEAD" and not encoded:
        assert int(length) == len(body), f"{what}: Content-Length {length}, body {len(body)}"


def test_every_tensor_every_variant(server):
    """Deterministic sweep: each tensor of both archives, each order/format, GET and HEAD."""
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for archive_id in ("layouts", "pickled"):
            listing = client.get(f"/archives/{archive_id}/tensors")
            assert listing.status_code == 200, listing.text
            names = [t["name"] for t in listing.json()["tensors"]]
            assert names
            for name in names:
                base = f"/archives/{archive_id}/tensors/{name}"
                layout = client.get(f"{base}/layout")
                check_response("GET", layout.status_code, layout.headers, layout.content, str(layout.url))
                for order in ("default", "contiguous"):
                    for fmt in ("raw", "npy"):
                        for method in ("GET", "HEAD"):
                            got = client.request(
                                method, f"{base}/data", params={"order": order, "format": fmt}
                            )
                            check_data(method, got)
            bundle = client.get(f"/archives/{archive_id}/safetensors")
            check_response("GET", bundle.status_code, bundle.headers, bundle.content, str(bundle.url))


def check_data(method: str, got: httpx.Response) -> None:
    what = f"{method} {got.url}"
    check_response(method, got.status_code, got.headers, got.content, what)
    assert got.status_code in (200, 422), f"{what} -> {got.status_code}"
    if method == "GET" and got.status_code == 200:
        assert len(got.content) == int(got.headers["content-length"]), what


# Range / If-Range / If-None-Match are read from the headers, so they are not in the schema.
_number = st.one_of(st.integers(0, 5000), st.integers(-(2**70), 2**70).map(str), st.just(""))
_spec = st.one_of(
    st.builds(lambda a, b: f"{a}-{b}", _number, _number),
    st.builds(lambda a: f"{a}-", _number),
    st.builds(lambda b: f"-{b}", _number),
    st.text(alphabet="0123456789-, =bytes*", max_size=20),
)
_unit = st.sampled_from(["bytes", "Bytes", "items", ""])
_range = st.one_of(
    st.builds(lambda unit, specs: f"{unit}={','.join(specs)}", _unit, st.lists(_spec, max_size=4)),
    # any field-value octets (visible ASCII, space, obs-text); control characters are the HTTP
    # parser's business (uvicorn answers 400 before the app runs), so they are left out
    st.text(alphabet=st.characters(codec="latin-1", exclude_categories=["Cc"]), max_size=30),
)
_etag_like = st.one_of(
    st.just("*"), st.just('W/"x"'), st.text(alphabet='"abcdef0123456789, W/*', max_size=40)
)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


@given(
    method=st.sampled_from(["GET", "HEAD"]),
    path=st.sampled_from(
        [
            "/tensors/conv.weight/data",
            "/archives/layouts/tensors/strided/data?format=npy",
            "/archives/layouts/tensors/transposed/data?order=contiguous",
            "/archives/layouts/tensors/empty/data",
            "/archives/pickled/safetensors",
        ]
    ),
    range_header=st.none() | _range,
    if_range=st.none() | _etag_like,
    if_none_match=st.none() | _etag_like,
)
@FUZZ_SETTINGS
def test_conditional_and_range_headers(http, method, path, range_header, if_range, if_none_match):
    headers = {
        name: value.strip(" \t").encode("latin-1")
        for name, value in (("range", range_header), ("if-range", if_range), ("if-none-match", if_none_match))
        if value is not None
    }
    got = http.request(method, path, headers=headers)
    what = f"{method} {path} {headers!r}"
    check_response(method, got.status_code, got.headers, got.content, what)
    assert got.status_code in (200, 206, 304, 404, 416, 422), f"{what} -> {got.status_code}"
    if method == "GET" and got.status_code in (200, 206):
        assert len(got.content) == int(got.headers["content-length"]), what
