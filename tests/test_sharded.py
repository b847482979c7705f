"""Sharded checkpoints (`pytorch_model.bin.index.json` + torch.save shards, written as transformers
writes them) over HTTP, S3, GCS and the Hub: one archive over the shards, equal to torch.load of each shard,
reading only the shards a selection needs. The local checks are in test_sharded_rules.py."""

from __future__ import annotations

import pathlib

import pytest

import reader
import reader.torch
from reader.blocking.sync import run_sync
from reader.sources import S3Settings
from testing.faultserver import FaultServer
from testing.fixtures.make_sharded import INDEX_NAME, small_gpt_state_dict, write_sharded
from testing.gcs import fake_gcs  # noqa: F401 - session fixture: fake-gcs-server on loopback
from testing.sharded_checkpoints import (
    copy_checkpoint,
    names_in,
    raw,
    same_array,
    shard_file,
    torch,
    truth,
)

pytestmark = pytest.mark.emulator


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> pathlib.Path:
    """Shards of about 600 KiB: larger than a remote open's tail, so tensor bytes take data requests."""
    state = small_gpt_state_dict(width=128, vocab=1024)
    return write_sharded(tmp_path_factory.mktemp("sharded-big") / "gpt", state, max_shard_size=600 << 10)


async def test_over_http_a_load_reads_only_the_shards_it_needs(big):
    expected = truth(big)
    async with FaultServer() as server:
        for path in big.parent.iterdir():
            server.put(f"/models/gpt/{path.name}", path.read_bytes())
        async with reader.open_archive(server.url(f"/models/gpt/{INDEX_NAME}")) as ar:
            assert len(ar.shards) >= 4
            server.log.clear()
            names = names_in(big, 3)
            arrays = await ar.load(names=names)
            for name in names:
                same_array(arrays[name], expected[name])
            paths = {record.path for record in server.log}
            assert paths == {f"/models/gpt/{shard_file(big, 3)}"}
            assert sum(record.body_bytes for record in server.log) > 0
            stats = ar.shard_stats
            assert "data" in stats[shard_file(big, 3)]
            assert all("data" not in s for name, s in stats.items() if name != shard_file(big, 3))
            server.log.clear()
            both = await ar.read_many([names_in(big, 1)[0], names_in(big, 4)[0]], order="contiguous")
            assert {record.path for record in server.log} <= {
                f"/models/gpt/{shard_file(big, 1)}",
                f"/models/gpt/{shard_file(big, 4)}",
            }
            assert both[names_in(big, 4)[0]] == raw(expected[names_in(big, 4)[0]])
            total = ar.stats
            assert total["data"]["bytes"] == sum(
                s.get("data", {}).get("bytes", 0) for s in ar.shard_stats.values()
            )
        server.log.clear()
        loaded = await reader.open_archive(server.url(f"/models/gpt/{INDEX_NAME}") + "?download=true")
        try:  # a query on the index's URL is carried to the shards' URLs
            assert await loaded.read("lm_head.weight", order="contiguous") == raw(expected["lm_head.weight"])
            shard_requests = [r for r in server.log if r.path.endswith(".bin")]
            assert shard_requests and all(r.target.endswith("?download=true") for r in shard_requests)
        finally:
            await loaded.close()
        missing = shard_file(big, 2)
        server.remove(f"/models/gpt/{missing}")
        with pytest.raises(reader.FileNotFound, match=missing):
            await reader.open_archive(server.url(f"/models/gpt/{INDEX_NAME}"))


def _s3(seaweed_s3) -> S3Settings:
    return S3Settings(
        region=seaweed_s3.region,
        endpoint=seaweed_s3.endpoint,
        access_key=seaweed_s3.access_key,
        secret_key=seaweed_s3.secret_key,
    )


def test_from_s3(big, seaweed_s3):
    expected = truth(big)
    for path in big.parent.iterdir():
        seaweed_s3.upload(seaweed_s3.private_bucket, f"sharded/gpt/{path.name}", path)
    uri = f"s3://{seaweed_s3.private_bucket}/sharded/gpt/{INDEX_NAME}"
    arrays = reader.load(uri, s3_settings=_s3(seaweed_s3))
    assert sorted(arrays) == sorted(expected)
    for name, tensor in expected.items():
        same_array(arrays[name], tensor)

    async def one_shard() -> dict[str, dict[str, dict[str, int]]]:
        async with reader.open_archive(uri, s3_settings=_s3(seaweed_s3)) as ar:
            part = await ar.load(names=names_in(big, 2))
            for name in names_in(big, 2):
                same_array(part[name], expected[name])
            return ar.shard_stats

    stats = run_sync(one_shard)
    assert "data" in stats[shard_file(big, 2)]
    assert all("data" not in s for name, s in stats.items() if name != shard_file(big, 2))
    denied = S3Settings(region=seaweed_s3.region, endpoint=seaweed_s3.endpoint)  # anonymous: refused
    with pytest.raises(reader.SourceError):
        reader.load(uri, s3_settings=denied)


def test_from_the_hugging_face_hub_each_shard_at_the_revision(big, tmp_path, monkeypatch):
    from testing.fakehub import FakeHub, HubRepo, commit_of

    expected = truth(big)
    files = {path.name: path for path in big.parent.iterdir()}
    changed = tmp_path / "changed"  # the next commit: shard 2's first tensor changed
    changed_index = copy_checkpoint(big, changed)
    shard = changed / shard_file(big, 2)
    state = torch.load(shard, weights_only=True)
    name = next(iter(state))
    state[name] = state[name] * 2
    torch.save(state, shard)
    first, second, broken = commit_of("sharded-1"), commit_of("sharded-2"), commit_of("sharded-3")
    commits = {
        first: files,
        second: {path.name: path for path in changed_index.parent.iterdir()},
        broken: {name: path for name, path in files.items() if name != shard_file(big, 3)},
    }
    for variable in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    with FakeHub([HubRepo("org/gpt", commits, {"main": first, "broken": broken})]) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        location = f"hf://org/gpt/{INDEX_NAME}"

        async def check() -> None:
            async with reader.open_archive(location) as ar:
                assert {archive.source.policy.commit for archive in ar.shards.values()} == {first}
                assert await ar.read(name, order="contiguous") == raw(expected[name])
                hub.rotate({("org/gpt", "main"): second})
                assert await ar.read(name, order="contiguous") == raw(expected[name])  # still pinned
                assert not await ar.revalidate()  # main now names other bytes for shard 2
            async with reader.open_archive(location) as again:
                assert await again.read(name, order="contiguous") == raw(state[name])

        run_sync(check)
        arrays = reader.load(f"hf://org/gpt@{first}/{INDEX_NAME}", names=[name, "lm_head.weight"])
        same_array(arrays[name], expected[name])
        same_array(arrays["lm_head.weight"], expected["lm_head.weight"])
        with pytest.raises(reader.FileNotFound, match=shard_file(big, 3)):
            reader.load(f"hf://org/gpt@broken/{INDEX_NAME}")


def test_from_gcs(big, fake_gcs, monkeypatch):  # noqa: F811
    expected = truth(big)
    fake_gcs.create_bucket("pt2serve-sharded")
    for path in big.parent.iterdir():
        fake_gcs.upload("pt2serve-sharded", f"gpt/{path.name}", path)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.endpoint.removeprefix("http://"))
    names = [*names_in(big, 2), "lm_head.weight"]
    arrays = reader.load(f"gs://pt2serve-sharded/gpt/{INDEX_NAME}", names=names)
    assert list(arrays) == names
    for name in names:
        same_array(arrays[name], expected[name])
