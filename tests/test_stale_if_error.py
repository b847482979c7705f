"""Stale-if-error: a cached open whose origin gives no answer at all (port closed, every attempt
timed out) opens the last complete version it has, says so (`ar.revalidated`, `ar.stale`, a
warning, one line from the CLI, /healthz and a header from the service); an HTTP answer (403, 404,
412, 503) never counts as unreachable; bytes never fetched stay NotCached. Real servers throughout."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

import numpy as np
import pytest

import reader
from reader.cache import STALE_IF_ERROR_ENV, CacheStore
from reader.sources import HttpOptions
from testing.faultserver import FaultServer, Hang, Status
from testing.paths import ARCHIVES
from testing.service import in_process, make_app

pytestmark = pytest.mark.emulator

# short timeouts and few attempts: an unreachable origin is given up on in well under a second
FAST = HttpOptions(
    backoff_base=0.01,
    backoff_cap=0.05,
    connect_timeout=0.5,
    read_timeout=0.5,
    max_attempts=2,
    time_budget=10.0,
)
LAYOUTS = (ARCHIVES / "layouts.pt2").read_bytes()
MANY = (ARCHIVES / "many.pt2").read_bytes()


async def load(url: str, cache_dir, **options) -> tuple[dict[str, np.ndarray], bool, object]:
    async with reader.open_archive(url, cache_dir=cache_dir, http_options=FAST, **options) as ar:
        return await ar.load(copy=True), ar.revalidated, ar.stale


def same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> bool:
    return got.keys() == want.keys() and all(got[k].tobytes() == want[k].tobytes() for k in want)


async def cached_then_down(tmp_path, data: bytes = LAYOUTS) -> tuple[str, dict[str, np.ndarray]]:
    """A location whose archive was loaded once through the cache, and whose server is now stopped
    (its port closed)."""
    async with FaultServer() as server:
        server.put("/m.pt2", data)
        url = server.url("/m.pt2")
        arrays, revalidated, stale = await load(url, tmp_path)
        assert revalidated and stale is None
    return url, arrays


async def test_a_closed_port_opens_the_cached_version_and_says_so(tmp_path, caplog):
    url, want = await cached_then_down(tmp_path)
    (version,) = CacheStore(tmp_path).list()
    with caplog.at_level(logging.WARNING, logger="reader.cache"):
        got, revalidated, stale = await load(url, tmp_path)
    assert same(got, want)
    assert revalidated is False
    assert stale is not None and stale.version == version.version and stale.location == url
    assert 0 <= stale.age < 3600
    (warning,) = [r for r in caplog.records if r.name == "reader.cache"]
    assert warning.levelno == logging.WARNING
    assert url in warning.getMessage() and version.version in warning.getMessage()
    assert " old" in warning.getMessage()


async def test_an_origin_that_never_answers_opens_the_cached_version(tmp_path):
    async with FaultServer() as server:
        server.put("/m.pt2", LAYOUTS)
        url = server.url("/m.pt2")
        want, _, _ = await load(url, tmp_path)
        server.faults.append(Hang(times=None))  # every request read, none answered
        got, revalidated, stale = await load(url, tmp_path)
        assert same(got, want) and revalidated is False and stale is not None
        assert "timeout" in stale.reason.lower() or "time budget" in stale.reason


async def test_stale_if_error_off_raises_as_before(tmp_path, monkeypatch):
    url, _ = await cached_then_down(tmp_path)
    with pytest.raises(reader.OriginUnreachable) as raised:
        await load(url, tmp_path, stale_if_error=False)
    assert url in str(raised.value)
    monkeypatch.setenv(STALE_IF_ERROR_ENV, "0")
    with pytest.raises(reader.SourceError, match="giving up"):
        await load(url, tmp_path)
    _, revalidated, _ = await load(url, tmp_path, stale_if_error=True)  # the keyword wins
    assert revalidated is False


@pytest.mark.parametrize("status", [403, 404, 412, 503])
async def test_an_http_answer_at_revalidation_is_never_unreachable(tmp_path, status):
    async with FaultServer() as server:
        server.put("/m.pt2", LAYOUTS)
        url = server.url("/m.pt2")
        await load(url, tmp_path)
        server.faults.append(Status(status, times=None))
        with pytest.raises(reader.SourceError) as raised:
            await load(url, tmp_path)
        assert not isinstance(raised.value, reader.OriginUnreachable), raised.value
        assert url in str(raised.value)
        assert server.faults[0].applied >= 1


async def test_nothing_cached_and_unreachable_is_a_source_error_naming_the_location(tmp_path):
    async with FaultServer() as server:
        url = server.url("/m.pt2")
    with pytest.raises(reader.SourceError) as raised:
        await load(url, tmp_path)
    assert url in str(raised.value)


async def test_a_version_whose_open_never_completed_is_not_served_stale(tmp_path):
    url, _ = await cached_then_down(tmp_path)
    (version,) = CacheStore(tmp_path).list()
    (version.path / "complete").unlink()  # as if the process died during its first open
    with pytest.raises(reader.OriginUnreachable, match="no complete version"):
        await load(url, tmp_path)


async def test_bytes_never_fetched_stay_not_cached(tmp_path):
    async with FaultServer() as server:
        server.put("/many.pt2", MANY)
        url = server.url("/many.pt2")
        async with reader.open_archive(url, cache_dir=tmp_path, http_options=FAST) as ar:
            names = [t.name for t in ar.tensors()]  # the index only: no tensor's bytes
    async with reader.open_archive(url, cache_dir=tmp_path, http_options=FAST) as ar:
        assert ar.revalidated is False and ar.stale is not None
        assert [t.name for t in ar.tensors()] == names
        with pytest.raises(reader.NotCached):
            await ar.load(copy=True)


async def test_a_stale_archive_revalidates_once_its_origin_is_back(tmp_path):
    async with FaultServer() as server:
        server.put("/m.pt2", LAYOUTS)
        url = server.url("/m.pt2")
        await load(url, tmp_path)
        await server.stop()
        async with reader.open_archive(url, cache_dir=tmp_path, http_options=FAST) as ar:
            assert ar.stale is not None
            with pytest.raises(reader.OriginUnreachable):
                await ar.revalidate()  # still away: said, not guessed
            await server.start()  # the same port again
            assert await ar.revalidate() is True
            assert ar.revalidated is True and ar.stale is None


async def test_the_cli_says_in_one_line_that_it_read_a_stale_version(tmp_path):
    url, _ = await cached_then_down(tmp_path)
    (version,) = CacheStore(tmp_path).list()
    env = {**os.environ, "PT2SERVE_CACHE_DIR": str(tmp_path)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app",
        "ls",
        url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("pt2serve: warning:") and url in lines[0] and version.version in lines[0]
    want = reader.load(ARCHIVES / "layouts.pt2")
    assert all(name in out.decode() for name in want)  # the listing itself, from the cache


async def test_the_service_says_it_serves_a_stale_version(tmp_path, monkeypatch):
    monkeypatch.setenv("PT2SERVE_CACHE_DIR", str(tmp_path))
    async with FaultServer() as server:
        server.put("/m.pt2", LAYOUTS)
        url = server.url("/m.pt2")
        async with in_process(make_app([f"m={url}"])) as client:
            name = (await client.get("/tensors")).json()["tensors"][0]["name"]
            fresh = await client.get(f"/tensors/{name}/data")
            assert "x-pt2serve-stale" not in fresh.headers
            health = await client.get("/healthz")
            assert health.json()["status"] == "ok" and "stale" not in health.json()
    async with in_process(make_app([f"m={url}"], upstream_attempts=1, upstream_timeout=0.5)) as client:
        health = await client.get("/healthz")
        assert health.status_code == 200
        body = health.json()
        assert body["status"] == "degraded" and body["archives"] == {"m": "open"}
        assert body["stale"]["m"]["stale"] is True and body["stale"]["m"]["revalidated"] is False
        version = body["stale"]["m"]["version"]
        answer = await client.get(f"/tensors/{name}/data")
        assert answer.status_code == 200 and answer.content == fresh.content
        assert answer.headers["x-pt2serve-stale"].startswith(f"{version}; age=")
        assert "immutable" not in answer.headers["cache-control"]
        layout = await client.get(f"/tensors/{name}/layout")
        assert "x-pt2serve-stale" in layout.headers and "immutable" not in layout.headers["cache-control"]
        listed = (await client.get("/archives")).json()["archives"][0]
        assert listed["stale"] is True and listed["revalidated"] is False


async def test_a_sharded_checkpoint_opens_stale_when_its_origin_is_down(tmp_path):
    from testing.fixtures.make_sharded import INDEX_NAME, write_sharded

    index = write_sharded(tmp_path / "sharded" / "gpt")
    async with FaultServer() as server:
        for path in index.parent.iterdir():
            server.put(f"/gpt/{path.name}", path.read_bytes())
        url = server.url(f"/gpt/{INDEX_NAME}")
        async with reader.open_archive(url, cache_dir=tmp_path / "cache", http_options=FAST) as ar:
            want = await ar.load(copy=True)
            assert ar.revalidated is True and ar.stale is None
    async with reader.open_archive(url, cache_dir=tmp_path / "cache", http_options=FAST) as ar:
        assert ar.revalidated is False
        assert ar.stale is not None and ar.stale.location == url  # the index, first
        assert same(await ar.load(copy=True), want)
