"""Archives behind a redirect across two origins: nginx (`return 302` to a signed URL) in front of the
FaultServer holding the bytes. Exact bytes on both transports (http1/, and
httpx's own on `http2=True`); later reads straight to the target; the
origin's credentials never sent to the target; an expired target resolved again, pinned to the
version opened; a fresh refusal, a loop or an odd target a clear SourceError."""

from __future__ import annotations

import pathlib

import httpx
import numpy as np
import pytest

import reader
from reader.sources import HttpOptions, HttpSource
from testing.cli import acli
from testing.fakehub import NginxSite
from testing.faultserver import DropAfter, FaultServer, Status
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator

FLOAT32 = 7
SMALL = np.arange(256, dtype=np.float32).tobytes()
BIG = np.random.default_rng(26).standard_normal(3 * (1 << 20) // 4 + 1000, dtype=np.float32).tobytes()
STORED = "/store/model.pt2"
SIGNED = "?X-Amz-Signature=s3cr3t&Expires=1"  # what a CDN's signed URL carries: never in an error


def fast(path: str) -> HttpOptions:
    return HttpOptions(
        backoff_base=0.01, backoff_cap=0.05, read_timeout=2.0, time_budget=10.0, http2=path == "http2"
    )


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("redirects") / "model.pt2"
    write_pt2(path, {"small": (FLOAT32, [256], SMALL), "big": (FLOAT32, [len(BIG) // 4], BIG)})
    return path


@pytest.fixture(params=["http1", "http2"])
def path(request) -> str:
    """http1: reader/sources/transport/http1/; http2: httpx's own transport."""
    return request.param


@pytest.fixture
async def target(archive):
    async with FaultServer() as server:
        server.put(STORED, archive.read_bytes())
        yield server


@pytest.fixture
def origin(target):
    """nginx answering /models/model.pt2 with 302 to the target's signed URL."""
    with NginxSite(f"""
        location = /models/model.pt2 {{ return 302 {target.url(STORED)}{SIGNED}; }}
        location = /loop {{ return 302 /loop; }}""") as site:  # fmt: skip
        yield site


class Bearer(httpx.Auth):
    def auth_flow(self, request: httpx.Request):
        request.headers["Authorization"] = "Bearer origin-only"
        yield request


async def _open(url: str, options: HttpOptions, credential: str) -> reader.Archive:
    """The archive behind `url`, with the origin's credential as a header or an httpx auth flow."""
    if credential == "header":
        options = HttpOptions(**{**options.__dict__, "headers": {"Authorization": "Bearer origin-only"}})
        source = await HttpSource.open(url, tail_size=4096, options=options)
    else:
        source = await HttpSource.open(url, tail_size=4096, options=options, auth=Bearer())
    return await reader.open_archive(source)


async def _stream(ar: reader.Archive, name: str) -> bytes:
    return b"".join([bytes(chunk) async for chunk in ar.tensor(name).chunks()])


@pytest.mark.parametrize("credential", ["header", "auth flow"])
async def test_reads_follow_the_redirect_and_then_go_straight_to_the_target(
    target, origin, path, credential
) -> None:
    ar = await _open(origin.url("models/model.pt2"), fast(path), credential)
    async with ar:
        assert await ar.read("small") == SMALL
        assert await ar.read("big") == BIG  # one range of 3 MiB
        assert await _stream(ar, "big") == BIG
    assert [(r["status"], r["auth"]) for r in origin.take_log()] == [(302, True)]  # only the open asked it
    assert target.log[0].target == STORED + SIGNED and target.log[0].range == "bytes=-4096"
    assert len(target.log) >= 4
    assert all("authorization" not in r.headers for r in target.log)
    assert all(r.headers.get("if-match") == target.etag(STORED) for r in target.log[1:])
    assert not target.errors


async def test_an_expired_target_is_resolved_again_and_the_stream_resumes(target, origin, path) -> None:
    async with reader.open_archive(
        origin.url("models/model.pt2"), tail_size=4096, http_options=fast(path)
    ) as ar:
        origin.take_log()
        target.log.clear()
        # the stream's body is cut; the resume finds the signature expired (403): resolve, then resume
        target.faults += [DropAfter(nbytes=300_000, times=1), Status(403, times=1, after=1)]
        assert await _stream(ar, "big") == BIG
    cut, refused, resumed = target.log
    assert (cut.status, refused.status, resumed.status) == (206, 403, 206)
    resumed_at = int(resumed.range.removeprefix("bytes=").split("-")[0])
    assert resumed.range == refused.range and resumed_at == int(cut.range[6:].split("-")[0]) + 300_000
    # resolved again through the origin, pinned by If-Match; a range of 1 MiB or more
    assert [(r["status"], r["range"], r["if_match"]) for r in origin.take_log()] == [
        (302, resumed.range, target.etag(STORED))
    ]
    assert int(resumed.range.split("-")[1]) + 1 - resumed_at >= 1 << 20


async def test_an_object_replaced_behind_the_redirect_is_source_changed(
    target, origin, path, archive
) -> None:
    async with reader.open_archive(
        origin.url("models/model.pt2"), tail_size=4096, http_options=fast(path)
    ) as ar:
        opened = target.etag(STORED)
        target.put(STORED, archive.read_bytes() + b"\0")  # replaced; and the old signature expires
        target.faults.append(Status(403, times=1))
        with pytest.raises(reader.SourceChanged):
            await ar.read("big")
    assert [r.status for r in target.log[-2:]] == [403, 412]
    assert target.log[-1].headers["if-match"] == opened  # the pin went through the fresh redirect


async def test_a_target_that_refuses_a_fresh_signature_is_a_clear_error(target, origin) -> None:
    target.faults.append(Status(403, times=None))
    with pytest.raises(reader.SourceError) as caught:
        await reader.open_archive(origin.url("models/model.pt2"), http_options=fast("http1"))
    message = str(caught.value)
    assert "403" in message and "redirect target 127.0.0.1" in message and "signature" in message
    assert "s3cr3t" not in message
    assert len(origin.take_log()) == 1  # refused straight after a redirect: no loop of re-resolves


async def test_a_target_refusing_after_open_resolves_once_then_fails(target, origin) -> None:
    async with reader.open_archive(
        origin.url("models/model.pt2"), tail_size=4096, http_options=fast("http1")
    ) as ar:
        target.faults.append(Status(403, times=None))
        with pytest.raises(reader.SourceError, match="redirect target"):
            await ar.read("big")
    assert [r["status"] for r in origin.take_log()] == [302, 302]  # the open, one re-resolve


async def test_revalidate_asks_the_origin_and_follows_its_redirect(target, origin, archive) -> None:
    source = await HttpSource.open(origin.url("models/model.pt2"), tail_size=4096, options=fast("http1"))
    try:
        assert await source.revalidate()
        target.put(STORED, archive.read_bytes() + b"\0")
        assert not await source.revalidate()
    finally:
        await source.close()
    assert [(r["method"], r["status"]) for r in origin.take_log()] == [
        ("GET", 302),
        ("HEAD", 302),
        ("HEAD", 302),
    ]
    assert [(r.method, r.status) for r in target.log[1:]] == [("HEAD", 304), ("HEAD", 200)]


@pytest.mark.parametrize(("location", "message"), [("/loop", "too many redirects"), ("ftp", "not http")])
async def test_a_redirect_loop_or_an_odd_target_is_a_source_error(target, origin, location, message) -> None:
    if location == "ftp":
        target.faults.append(Status(302, times=None, headers={"Location": "ftp://127.0.0.1/model.pt2"}))
        url = target.url(STORED)
    else:
        url = origin.url("loop")
    with pytest.raises(reader.SourceError, match=message):
        await reader.open_archive(url, http_options=fast("http1"))


async def test_pt2serve_ls_follows_a_redirect(target, origin) -> None:
    code, out, err = await acli("ls", origin.url("models/model.pt2"))
    assert code == 0, err
    assert "small" in out and "big" in out


async def test_a_read_into_a_buffer_follows_the_redirect_and_resumes_after_a_cut(
    target, origin, path
) -> None:
    async with reader.open_archive(
        origin.url("models/model.pt2"), tail_size=4096, http_options=fast(path)
    ) as ar:
        origin.take_log()
        target.log.clear()
        # the body going into the buffer is cut; the resume finds the signature expired: resolve, resume
        target.faults += [DropAfter(nbytes=300_000, times=1), Status(403, times=1, after=1)]
        loaded = await ar.load(names=["big"])
    assert loaded["big"].tobytes() == BIG
    cut, refused, resumed = target.log
    assert (cut.status, refused.status, resumed.status) == (206, 403, 206)
    resumed_at = int(resumed.range.removeprefix("bytes=").split("-")[0])
    assert resumed_at == int(cut.range[6:].split("-")[0]) + 300_000
    assert all("authorization" not in r.headers for r in target.log)
    assert [(r["status"], r["if_match"]) for r in origin.take_log()] == [(302, target.etag(STORED))]
