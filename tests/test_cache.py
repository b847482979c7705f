"""The local cache (reader/cache): hits from disk after one revalidation, a changed object a miss,
offline opens with no request, cut downloads, concurrent fillers and eviction, against a server the
tests own (FaultServer) and a real S3 server (SeaweedFS). Never stale bytes in any of them."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import pathlib

import numpy as np
import pytest

import reader
from reader.cache import CacheStore
from reader.sources import HttpOptions
from testing.faultserver import DropAfter, FaultServer
from testing.paths import ARCHIVES

pytestmark = pytest.mark.emulator

FAST = HttpOptions(backoff_base=0.01, backoff_cap=0.05, read_timeout=2.0, time_budget=10.0)
LAYOUTS = (ARCHIVES / "layouts.pt2").read_bytes()
DTYPES = (ARCHIVES / "dtypes.pt2").read_bytes()


def local_arrays(path: pathlib.Path) -> dict[str, np.ndarray]:
    return reader.load(path, copy=True)


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        assert got[name].tobytes() == want[name].tobytes(), name


@pytest.fixture
async def server():
    async with FaultServer() as srv:
        srv.put("/m.pt2", LAYOUTS)
        yield srv
        assert not srv.errors


async def load(location: str, cache_dir, **options) -> tuple[dict[str, np.ndarray], dict]:
    async with reader.open_archive(location, cache_dir=cache_dir, http_options=FAST, **options) as ar:
        arrays = await ar.load(copy=True)
        return arrays, ar.stats


async def test_second_open_is_one_request_and_reads_from_disk(server, tmp_path):
    want = local_arrays(ARCHIVES / "layouts.pt2")
    url = server.url("/m.pt2")
    first, _ = await load(url, tmp_path)
    assert_same(first, want)
    before = len(server.log)
    second, stats = await load(url, tmp_path)
    assert_same(second, want)
    asked = server.log[before:]
    assert len(asked) == 1, [(r.method, r.headers.get("range")) for r in asked]
    assert asked[0].method == "HEAD" and "if-none-match" in {k.lower() for k in asked[0].headers}
    assert stats["cache"]["bytes"] > 0 and stats.get("data", {"requests": 0})["requests"] == 0


async def test_loaded_arrays_from_the_cache_are_read_only_views(server, tmp_path):
    url = server.url("/m.pt2")
    await load(url, tmp_path)
    async with reader.open_archive(url, cache_dir=tmp_path, http_options=FAST) as ar:
        arrays = await ar.load()
    assert arrays and all(not array.flags.writeable for array in arrays.values() if array.size)


async def test_a_replaced_object_is_a_miss_never_stale_bytes(server, tmp_path):
    url = server.url("/m.pt2")
    await load(url, tmp_path)
    server.put("/m.pt2", DTYPES)  # a new ETag: another version
    got, _ = await load(url, tmp_path)
    assert_same(got, local_arrays(ARCHIVES / "dtypes.pt2"))
    versions = CacheStore(tmp_path).list()
    assert len(versions) == 2 and len({v.version for v in versions}) == 2


async def test_a_replaced_object_whose_index_is_not_cached_opens_as_the_new_version(server, tmp_path):
    # The index of a cached version is read from disk while the origin is asked whether it is still
    # current; a miss in it needs the origin, which says the object changed: the open goes on with
    # the version the object is now, never a mix of the two.
    server.put("/many.pt2", (ARCHIVES / "many.pt2").read_bytes())
    url = server.url("/many.pt2")
    await load(url, tmp_path)
    (version,) = CacheStore(tmp_path).list()
    for span in (version.path / "spans").iterdir():  # only the tail the open read stays in
        if int(span.name.split("-")[1]) != version.size:
            span.unlink()
    server.put("/many.pt2", DTYPES)
    got, _ = await load(url, tmp_path)
    assert_same(got, local_arrays(ARCHIVES / "dtypes.pt2"))


async def test_without_stale_if_error_a_cached_version_is_not_opened_unconfirmed(tmp_path):
    async with FaultServer() as gone:
        gone.put("/m.pt2", LAYOUTS)
        url = gone.url("/m.pt2")
        await load(url, tmp_path)
    with pytest.raises(reader.SourceError):  # online and unreachable: an error, not unconfirmed bytes
        await load(url, tmp_path, stale_if_error=False)


async def test_offline_opens_the_cached_version_with_no_request(server, tmp_path):
    url = server.url("/m.pt2")
    await load(url, tmp_path)
    before = len(server.log)
    got, _ = await load(url, tmp_path, offline=True)
    assert len(server.log) == before
    assert_same(got, local_arrays(ARCHIVES / "layouts.pt2"))


async def test_offline_reads_of_bytes_never_fetched_are_a_clear_error(server, tmp_path):
    server.put("/many.pt2", (ARCHIVES / "many.pt2").read_bytes())  # more than the tail an open reads
    url = server.url("/many.pt2")
    async with reader.open_archive(url, cache_dir=tmp_path, http_options=FAST) as ar:
        names = [t.name for t in ar.tensors() if t.readable]
    async with reader.open_archive(url, cache_dir=tmp_path, offline=True) as ar:
        with pytest.raises(reader.NotCached, match="offline"):
            await ar.read(names[0])


async def test_offline_without_a_cache_entry_is_a_clear_error(server, tmp_path):
    with pytest.raises(reader.NotCached, match="no version"):
        await load(server.url("/m.pt2"), tmp_path, offline=True)
    with pytest.raises(reader.NotCached, match="needs a cache"):
        async with reader.open_archive(server.url("/m.pt2"), offline=True):
            pass
    assert server.log == []


async def test_hf_hub_offline_applies_to_hf_locations_only(server, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    got, _ = await load(server.url("/m.pt2"), tmp_path)  # not hf://: still online
    assert got and server.log
    with pytest.raises(reader.NotCached):
        await load("hf://org/repo/model.pt2", tmp_path)


async def test_a_cut_download_leaves_a_miss_not_half_bytes(server, tmp_path):
    server.put("/many.pt2", (ARCHIVES / "many.pt2").read_bytes())  # more than the tail an open reads
    url = server.url("/many.pt2")
    want = local_arrays(ARCHIVES / "many.pt2")
    async with reader.open_archive(url, cache_dir=tmp_path, http_options=FAST) as ar:
        server.faults.append(DropAfter(100, times=None))  # every read cut: the retries give up
        with pytest.raises(reader.SourceError):
            await ar.load()
        server.faults.clear()
        with pytest.raises(reader.NotCached):  # nothing of the cut reads counts as in
            async with reader.open_archive(url, cache_dir=tmp_path, offline=True) as offline:
                await offline.load()
        assert_same(await ar.load(copy=True), want)  # the same open, now whole
    got, _ = await load(url, tmp_path, offline=True)
    assert_same(got, want)


async def test_a_corrupted_cache_file_is_caught_by_the_crc(server, tmp_path):
    url = server.url("/m.pt2")
    async with reader.open_archive(url, cache_dir=tmp_path, http_options=FAST) as ar:
        info = max((t for t in ar.tensors() if t.readable), key=lambda t: t.nbytes)
        await ar.read(info.name)  # the entry's bytes are in, not yet mapped by a load
    version = CacheStore(tmp_path).list()[0]
    with open(version.path / "data", "r+b") as data:
        entry_start = LAYOUTS.index(await_bytes := (await _entry_bytes(url, info.name)))
        data.seek(entry_start)
        data.write(bytes([await_bytes[0] ^ 0xFF]))
    with pytest.raises(reader.IntegrityError):
        await load(url, tmp_path, offline=True)


async def _entry_bytes(url: str, name: str) -> bytes:
    async with reader.open_archive(url) as ar:
        return await ar.read(name)


def _fill(url: str, cache_dir: str) -> str:
    arrays = reader.load(url, cache_dir=cache_dir, copy=True)
    return json.dumps({name: array.tobytes().hex() for name, array in arrays.items()})


async def test_two_processes_filling_one_cache_at_once(server, tmp_path):
    url = server.url("/m.pt2")
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        results = await asyncio.to_thread(pool.starmap, _fill, [(url, str(tmp_path))] * 2)
    want = {name: array.tobytes().hex() for name, array in local_arrays(ARCHIVES / "layouts.pt2").items()}
    assert [json.loads(result) for result in results] == [want, want]
    got, _ = await load(url, tmp_path, offline=True)
    assert {name: array.tobytes().hex() for name, array in got.items()} == want
    leftovers = [p for p in tmp_path.rglob(".tmp-*")]
    assert leftovers == []


async def test_a_size_cap_evicts_the_least_recently_used_version(tmp_path):
    async with FaultServer() as server:
        for name in ("a", "b", "c"):
            server.put(f"/{name}.pt2", LAYOUTS)
        store = CacheStore(tmp_path)
        for name in ("a", "b"):
            await load(server.url(f"/{name}.pt2"), store)
        await load(server.url("/a.pt2"), store)  # a used after b: b is the least recently used
        one = max(v.on_disk for v in store.list())
        capped = CacheStore(tmp_path, max_bytes=2 * one + one // 2)
        await load(server.url("/c.pt2"), capped)
        left = sorted(v.location.rsplit("/", 1)[-1] for v in capped.list())
        assert left == ["a.pt2", "c.pt2"]


def test_the_environment_names_the_cache(tmp_path, monkeypatch):
    async def run():
        async with FaultServer() as server:
            server.put("/m.pt2", LAYOUTS)
            monkeypatch.setenv("PT2SERVE_CACHE_DIR", str(tmp_path))
            await asyncio.to_thread(reader.load, server.url("/m.pt2"))  # the server runs on this loop
            monkeypatch.setenv("PT2SERVE_OFFLINE", "1")
            before = len(server.log)
            got = await asyncio.to_thread(reader.load, server.url("/m.pt2"), copy=True)
            assert len(server.log) == before
            return got

    assert_same(asyncio.run(run()), local_arrays(ARCHIVES / "layouts.pt2"))
    assert CacheStore(tmp_path).list()


async def test_s3_cached_reopen_is_one_request_and_a_change_a_miss(seaweed_s3, tmp_path, monkeypatch):
    for name, value in (
        ("AWS_ENDPOINT_URL", seaweed_s3.endpoint),
        ("AWS_ACCESS_KEY_ID", seaweed_s3.access_key),
        ("AWS_SECRET_ACCESS_KEY", seaweed_s3.secret_key),
        ("AWS_REGION", seaweed_s3.region),
    ):
        monkeypatch.setenv(name, value)
    bucket = seaweed_s3.private_bucket
    location = f"s3://{bucket}/cache/model.pt2"
    seaweed_s3.upload(bucket, "cache/model.pt2", ARCHIVES / "many.pt2")  # more than an open's tail
    first, stats = await load(location, tmp_path)
    assert stats["data"]["requests"] >= 1
    second, stats = await load(location, tmp_path)
    assert_same(second, first)
    assert_same(second, local_arrays(ARCHIVES / "many.pt2"))
    assert sum(purpose["requests"] for purpose in stats.values()) == 1, stats
    seaweed_s3.upload(bucket, "cache/model.pt2", DTYPES)
    third, _ = await load(location, tmp_path)
    assert_same(third, local_arrays(ARCHIVES / "dtypes.pt2"))


async def test_hub_cache_keyed_by_commit_reopens_with_one_request_and_follows_a_moved_main(
    tmp_path, monkeypatch
):
    from testing.fakehub import FakeHub
    from testing.hub_repos import C2, repos, weights

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    cache = tmp_path / "cache"
    location = "hf://org/model/model.pt2"
    with FakeHub(repos(tmp_path)) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        first, _ = await load(location, cache)
        assert first["big"].tobytes() == weights(1)["big"]
        hub.hub.take_log()
        hub.cdn.take_log()
        second, _ = await load(location, cache)
        assert second["big"].tobytes() == weights(1)["big"]
        assert [r["method"] for r in hub.hub.take_log()] == ["HEAD"] and hub.cdn.take_log() == []
        hub.rotate({("org/model", "main"): C2})  # main moves to other bytes: a miss
        third, _ = await load(location, cache)
        assert third["big"].tobytes() == weights(2)["big"]
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        offline, _ = await load(location, cache)  # the version used last: main's new commit
        assert offline["big"].tobytes() == weights(2)["big"]
        assert [v.location for v in CacheStore(cache).list()] == [location, location]
