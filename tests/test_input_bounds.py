"""Bounded input under the real server (`pt2serve serve`: uvicorn, httptools, app/protocol.py): a
request's head is capped (431) and `POST /archives/open`'s body is capped (413), each answered before
the rest is read, with the server's memory unmoved."""

from __future__ import annotations

import pathlib

import httpx
import pytest

from testing.cli import serve_process
from testing.paths import ARCHIVES
from testing.rawhttp import Answer, chunked, exchange, pieces

pytestmark = pytest.mark.emulator

MB = 1 << 20
SPECS = [f"layouts={ARCHIVES / 'layouts.pt2'}"]
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def rss(pid: int) -> int:
    status = pathlib.Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) << 10


@pytest.fixture(scope="module")
def server():
    with serve_process(SPECS, "--allow-open", str(ARCHIVES / "*.pt2")) as (url, proc):
        yield url, proc.pid


def open_request(framing: bytes) -> bytes:
    return b"POST /archives/open HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + framing


def test_a_32_mb_header_is_refused_before_it_is_read(server) -> None:
    url, pid = server
    before = rss(pid)
    answer = exchange(url, [HEALTHZ, b"X-Big: ", *pieces(32 * MB), b"\r\n\r\n"])
    assert answer.status == 431, answer
    assert answer.error_code() == "header_too_large"
    assert answer.headers["connection"] == "close"
    assert answer.sent < 8 * MB, answer.sent  # refused at 64 KiB; the rest was never read
    assert rss(pid) - before < 16 * MB


def test_a_200_mb_body_with_its_length_is_refused_at_once(server) -> None:
    url, pid = server
    before = rss(pid)
    head = open_request(b"Content-Length: %d\r\n\r\n" % (200 * MB))
    answer = exchange(url, [head, *pieces(200 * MB)])
    assert answer.status == 413, answer
    assert answer.error_code() == "body_too_large"
    assert answer.sent < 32 * MB, answer.sent
    assert rss(pid) - before < 16 * MB


def test_a_chunked_200_mb_body_is_refused_past_the_cap(server) -> None:
    url, pid = server
    before = rss(pid)
    head = open_request(b"Transfer-Encoding: chunked\r\n\r\n")
    answer = exchange(url, [head, *chunked(pieces(200 * MB, 64 << 10))])
    assert answer.status == 413, answer
    assert answer.error_code() == "body_too_large"
    assert answer.sent < 32 * MB, answer.sent
    assert rss(pid) - before < 16 * MB


def test_a_client_that_writes_everything_first_reads_the_refusal(server) -> None:
    """The rest of a refused request is read and dropped for a while (a lingering close), so a client
    that reads only once its whole request is written (httpx, most clients) gets the answer, not
    a reset."""
    url, _ = server
    answer = httpx.post(
        f"{url}/archives/open", content=b"x" * (4 * MB), headers={"content-type": "application/json"}
    )
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "body_too_large"
    answer = httpx.get(f"{url}/healthz", headers={"x-big": "a" * (1 * MB)})
    assert answer.status_code == 431 and answer.json()["error"]["code"] == "header_too_large"


def test_a_small_body_still_opens(server) -> None:
    url, _ = server
    body = b'{"location": "%s"}' % str(ARCHIVES / "dtypes.pt2").encode()
    answer = exchange(url, [open_request(b"Content-Length: %d\r\n\r\n" % len(body)) + body])
    assert answer.status == 200, answer


@pytest.fixture(scope="module")
def capped():
    """A server whose heads may take 2048 bytes."""
    with serve_process(SPECS, "--max-header-bytes", "2048") as (url, _):
        yield url


def head_of(total: int, method: bytes = b"GET", extra: bytes = b"") -> bytes:
    """A request head of exactly `total` bytes (padded with one header field)."""
    start = method + b" /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra + b"X-Pad: "
    head = start + b"\r\n\r\n"
    return start + b"p" * (total - len(head)) + b"\r\n\r\n"


def test_the_cap_is_exact_and_counts_only_the_head(capped) -> None:
    assert exchange(capped, [head_of(2048)]).status == 200
    refused = exchange(capped, [head_of(2049)])
    assert refused.status == 431 and refused.error_code() == "header_too_large"
    # a head at the cap with its body in the same write: the body is not counted as head
    body = b"x" * 100_000
    post = head_of(2048, b"POST", b"Content-Length: %d\r\n" % len(body)) + body
    answer: Answer = exchange(capped, [post])
    assert answer.status == 405, answer  # reached the routes: /healthz has no POST
    # pipelined requests in one write, each head under the cap, the whole write over it
    answer = exchange(capped, [head_of(1500) * 2])
    assert answer.status == 200


def test_a_head_arriving_byte_by_byte_is_counted(capped) -> None:
    answer = exchange(capped, [bytes([b]) for b in head_of(4096)])
    assert answer.status == 431, answer
