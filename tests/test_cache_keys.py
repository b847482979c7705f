"""The cache keys the whole location (reader/cache/keys.py): two objects that differ only in their
query (`?f=`, `?versionId=`, a download token), an hf:// revision of another repository, or an s3://
key with `?` in it, never share a version history, so an offline or stale-if-error open hands out
the object asked for or a NotCached, never another object's bytes; a presigned URL's signature is
left out of the key (a new signature of the same URL is a hit) and nothing secret reaches the disk;
folders keyed without the query (the cache's format before) are never opened. Real servers (the
tests' FaultServer, nginx as the Hub, SeaweedFS as S3), the real cache on a tmp folder."""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

import reader
from reader.cache import CacheStore
from reader.cache.store import digest
from reader.sources import HttpOptions, redact_location
from testing.faultserver import FaultServer
from testing.paths import ARCHIVES

pytestmark = pytest.mark.emulator

FAST = HttpOptions(
    backoff_base=0.01,
    backoff_cap=0.05,
    connect_timeout=0.5,
    read_timeout=2.0,
    max_attempts=2,
    time_budget=10.0,
)
LAYOUTS = (ARCHIVES / "layouts.pt2").read_bytes()  # 14 tensors
DTYPES = (ARCHIVES / "dtypes.pt2").read_bytes()  # 22 tensors


def arrays_of(name: str) -> dict[str, np.ndarray]:
    return reader.load(ARCHIVES / name, copy=True)


async def load(location: str, cache_dir, **options) -> dict[str, np.ndarray]:
    async with reader.open_archive(location, cache_dir=cache_dir, http_options=FAST, **options) as ar:
        return await ar.load(copy=True)


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    assert all(got[name].tobytes() == want[name].tobytes() for name in want)


def disk_bytes(folder: pathlib.Path) -> bytes:
    """Every file name and every small file's bytes under `folder` (what a secret could hide in)."""
    found = []
    for path in sorted(folder.rglob("*")):
        found.append(str(path).encode())
        if path.is_file() and path.name != "data":
            found.append(path.read_bytes())
    return b"\n".join(found)


async def two_objects_cached(tmp_path, first: str, second: str) -> tuple[str, str]:
    """`first` (layouts.pt2) and `second` (dtypes.pt2), two objects at one path told apart by their
    query, each read once through the cache (`second` last); the server is stopped after."""
    async with FaultServer() as server:
        server.put(first, LAYOUTS)
        server.put(second, DTYPES)
        a, b = server.base_url + first, server.base_url + second
        assert_same(await load(a, tmp_path), arrays_of("layouts.pt2"))
        assert_same(await load(b, tmp_path), arrays_of("dtypes.pt2"))
    return a, b


QUERIES = [("/dl?f=a.pt2", "/dl?f=b.pt2"), ("/m.pt2?versionId=1", "/m.pt2?versionId=2")]


@pytest.mark.parametrize(("first", "second"), QUERIES)
async def test_offline_each_query_opens_its_own_object(tmp_path, first, second):
    a, b = await two_objects_cached(tmp_path, first, second)
    assert_same(await load(a, tmp_path, offline=True), arrays_of("layouts.pt2"))
    assert_same(await load(b, tmp_path, offline=True), arrays_of("dtypes.pt2"))
    listed = CacheStore(tmp_path).list()
    assert len({info.path.parent for info in listed}) == 2  # two objects, each a folder of its own
    assert {info.location for info in listed} == {a.split("?")[0]}  # shown without the query


@pytest.mark.parametrize(("first", "second"), QUERIES)
async def test_with_the_origin_down_each_query_opens_its_own_object(tmp_path, first, second):
    layouts_at, dtypes_at = await two_objects_cached(tmp_path, second, first)  # another order
    for location, name in ((layouts_at, "layouts.pt2"), (dtypes_at, "dtypes.pt2")):
        async with reader.open_archive(location, cache_dir=tmp_path, http_options=FAST) as ar:
            assert ar.revalidated is False and ar.stale is not None  # stale-if-error
            assert_same(await ar.load(copy=True), arrays_of(name))


async def test_a_query_never_cached_is_not_another_objects_version(tmp_path):
    a, _ = await two_objects_cached(tmp_path, "/dl?f=a.pt2", "/dl?f=b.pt2")
    other = a.replace("f=a.pt2", "f=c.pt2")
    with pytest.raises(reader.NotCached):
        await load(other, tmp_path, offline=True)
    with pytest.raises(reader.OriginUnreachable):
        await load(other, tmp_path)
    with pytest.raises(reader.NotCached):
        await load(a.split("?")[0], tmp_path, offline=True)


async def test_download_tokens_keep_objects_apart_and_never_reach_the_disk(tmp_path):
    a, b = await two_objects_cached(tmp_path, "/dl?token=s3cr3t-one", "/dl?token=s3cr3t-two")
    assert_same(await load(a, tmp_path, offline=True), arrays_of("layouts.pt2"))
    assert_same(await load(b, tmp_path, offline=True), arrays_of("dtypes.pt2"))
    assert b"s3cr3t" not in disk_bytes(tmp_path)


async def test_a_presigned_urls_signature_is_not_part_of_the_key_nor_stored(tmp_path):
    async with FaultServer() as server:
        server.put("/m.pt2", LAYOUTS)
        url = server.url("/m.pt2")
        s3 = f"{url}?X-Amz-Credential=AKIAEXAMPLE&X-Amz-Signature=0ne&X-Amz-Expires=60"
        assert_same(await load(s3, tmp_path), arrays_of("layouts.pt2"))
        sas = f"{url}?sv=2024-05-04&se=2030-01-01&sp=r&sr=b&sig=Tw0"
        assert_same(await load(sas, tmp_path), arrays_of("layouts.pt2"))
    resigned = f"{url}?X-Amz-Credential=AKIAEXAMPLE&X-Amz-Signature=thr3e&X-Amz-Expires=60"
    assert_same(await load(resigned, tmp_path, offline=True), arrays_of("layouts.pt2"))
    assert [info.location for info in CacheStore(tmp_path).list()] == [url]  # one object
    on_disk = disk_bytes(tmp_path)
    assert b"AKIAEXAMPLE" not in on_disk and b"0ne" not in on_disk and b"Tw0" not in on_disk


def as_the_old_format(new: pathlib.Path, old: pathlib.Path) -> None:
    """Each version under `new` copied into `old` as the cache kept it before the key had the query:
    the object folder named by the location without its query, and so is meta.json's location."""
    for info in CacheStore(new).list():
        shown = redact_location(info.location)
        target = old / digest(shown) / info.path.name
        shutil.copytree(info.path, target, dirs_exist_ok=True)
        meta = json.loads((target / "meta.json").read_text())
        meta.pop("key_format", None)
        meta["location"] = shown
        (target / "meta.json").write_text(json.dumps(meta))


async def test_folders_keyed_without_the_query_are_never_opened(tmp_path):
    """A cache written before the key had the query: `?f=b.pt2`'s version under the bare path. Read now,
    it is a miss (offline: NotCached; the origin down: OriginUnreachable), never dtypes.pt2's bytes
    for `?f=a.pt2`."""
    a, _ = await two_objects_cached(tmp_path / "new", "/dl?f=a.pt2", "/dl?f=b.pt2")
    old = tmp_path / "old"
    as_the_old_format(tmp_path / "new", old)
    assert len(list(old.iterdir())) == 1  # both versions in one object folder, as before
    for location in (a, a.split("?")[0]):
        with pytest.raises(reader.NotCached):
            await load(location, old, offline=True)
        with pytest.raises(reader.OriginUnreachable):
            await load(location, old)


async def test_hub_repositories_without_a_namespace_keep_their_own_versions(tmp_path, monkeypatch):
    """hf://gpt2@main/model.pt2 and hf://other@main/model.pt2: two repositories, two objects (their
    location without the query was `hf://main/model.pt2` for both)."""
    from testing.fakehub import FakeHub, HubRepo
    from testing.hub_repos import C1, C2, archive_bytes, weights

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    cache = tmp_path / "cache"
    repos = [
        HubRepo("gpt2", {C1: {"model.pt2": archive_bytes(tmp_path, 1)}}, {"main": C1}),
        HubRepo("other", {C2: {"model.pt2": archive_bytes(tmp_path, 2)}}, {"main": C2}),
    ]
    with FakeHub(repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        assert (await load("hf://gpt2@main/model.pt2", cache))["big"].tobytes() == weights(1)["big"]
        assert (await load("hf://other@main/model.pt2", cache))["big"].tobytes() == weights(2)["big"]
    got = await load("hf://gpt2@main/model.pt2", cache, offline=True)
    assert got["big"].tobytes() == weights(1)["big"]


async def test_an_s3_key_with_a_query_in_its_name_is_another_object(seaweed_s3, tmp_path, monkeypatch):
    """`s3://b/m.pt2?versionId=1` names the key `m.pt2?versionId=1` (the signer quotes the `?`): another
    object than `s3://b/m.pt2`, cached apart."""
    for name, value in (
        ("AWS_ENDPOINT_URL", seaweed_s3.endpoint),
        ("AWS_ACCESS_KEY_ID", seaweed_s3.access_key),
        ("AWS_SECRET_ACCESS_KEY", seaweed_s3.secret_key),
        ("AWS_REGION", seaweed_s3.region),
    ):
        monkeypatch.setenv(name, value)
    bucket = seaweed_s3.private_bucket
    seaweed_s3.upload(bucket, "keys/m.pt2?versionId=1", ARCHIVES / "layouts.pt2")
    seaweed_s3.upload(bucket, "keys/m.pt2", ARCHIVES / "dtypes.pt2")
    versioned, plain = f"s3://{bucket}/keys/m.pt2?versionId=1", f"s3://{bucket}/keys/m.pt2"
    assert_same(await load(versioned, tmp_path), arrays_of("layouts.pt2"))
    assert_same(await load(plain, tmp_path), arrays_of("dtypes.pt2"))
    assert_same(await load(versioned, tmp_path, offline=True), arrays_of("layouts.pt2"))


async def test_a_version_folder_that_names_another_key_is_an_error_never_read(tmp_path):
    """A version folder whose meta.json names another key than the folder's (it cannot be told apart
    from another object's): offline a miss, online a SourceError naming the folder, not a write."""
    async with FaultServer() as server:
        server.put("/m.pt2", LAYOUTS)
        url = server.url("/m.pt2")
        await load(url, tmp_path)
        (version,) = CacheStore(tmp_path).list()
        meta = json.loads((version.path / "meta.json").read_text())
        meta["key_digest"] = "0" * 64
        (version.path / "meta.json").write_text(json.dumps(meta))
        with pytest.raises(reader.NotCached):
            await load(url, tmp_path, offline=True)
        with pytest.raises(reader.SourceError, match="holds another object"):
            await load(url, tmp_path)
