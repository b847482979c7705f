"""Sharded checkpoints (`pytorch_model.bin.index.json` + torch.save shards, written as transformers
writes them): one archive over the shards, equal to torch.load of each shard, reading only the shards
a selection needs, locally, over HTTP and from S3."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import numpy as np
import pytest

import reader
import reader.torch
from reader.blocking.sync import run_sync
from reader.sources import S3Settings
from reader.versions import source_version
from testing.faultserver import FaultServer
from testing.fixtures.make_sharded import INDEX_NAME, small_gpt_state_dict, write_sharded
from testing.gcs import fake_gcs  # noqa: F401 - session fixture: fake-gcs-server on loopback

pytestmark = pytest.mark.emulator

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> pathlib.Path:
    """Five small shards (every file fits one open's tail)."""
    return write_sharded(tmp_path_factory.mktemp("sharded") / "gpt")


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> pathlib.Path:
    """Shards of about 600 KiB: larger than a remote open's tail, so tensor bytes take data requests."""
    state = small_gpt_state_dict(width=128, vocab=1024)
    return write_sharded(tmp_path_factory.mktemp("sharded-big") / "gpt", state, max_shard_size=600 << 10)


def weight_map(index: pathlib.Path) -> dict[str, str]:
    return json.loads(index.read_text())["weight_map"]


def truth(index: pathlib.Path) -> dict[str, torch.Tensor]:
    """Each name as torch.load of its own shard gives it."""
    shards = {s: torch.load(index.parent / s, weights_only=True) for s in set(weight_map(index).values())}
    return {name: shards[shard][name] for name, shard in weight_map(index).items()}


def names_in(index: pathlib.Path, shard_number: int) -> list[str]:
    shard = sorted(set(weight_map(index).values()))[shard_number - 1]
    return [name for name, s in weight_map(index).items() if s == shard]


def shard_file(index: pathlib.Path, shard_number: int) -> str:
    return sorted(set(weight_map(index).values()))[shard_number - 1]


def raw(tensor: torch.Tensor) -> bytes:
    """Row-major bytes, whatever the dtype."""
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def same_array(array: np.ndarray, tensor: torch.Tensor) -> None:
    assert tuple(array.shape) == tuple(tensor.shape)
    assert np.ascontiguousarray(array).tobytes() == raw(tensor)


def copy_checkpoint(index: pathlib.Path, to: pathlib.Path) -> pathlib.Path:
    shutil.copytree(index.parent, to)
    return to / index.name


# -- one archive over the shards ---------------------------------------------------------------------


async def test_every_tensor_equals_torch_load_of_its_shard(small):
    expected = truth(small)
    async with reader.open_archive(small) as ar:
        assert isinstance(ar, reader.ShardedArchive)
        assert ar.container == "sharded-checkpoint" and ar.models == ["checkpoint"]
        assert (
            len(ar.shards) == 5 and ar.total_size == json.loads(small.read_text())["metadata"]["total_size"]
        )
        assert sorted(t.name for t in ar.tensors()) == sorted(expected)
        for name, tensor in expected.items():
            info = ar.layout(name)
            assert info.dtype == str(tensor.dtype).removeprefix("torch.")
            assert (info.sizes, info.strides) == (tuple(tensor.shape), tuple(tensor.stride()))
            assert info.storage_offset == tensor.storage_offset()
            assert await ar.read(name, order="contiguous") == raw(tensor)
            same_array(await ar.read_numpy(name), tensor)
        loaded = await ar.load()
        assert list(loaded) == [t.name for t in ar.tensors()]
        for name, tensor in expected.items():
            same_array(loaded[name], tensor)


def test_tensors_are_listed_shard_by_shard_each_in_its_own_order(small):
    shards = sorted(set(weight_map(small).values()))
    in_files = [name for shard in shards for name in torch.load(small.parent / shard, weights_only=True)]
    assert list(reader.load(small)) == in_files


def test_reader_torch_load_keeps_ties_and_views_as_torch_load(small):
    expected = truth(small)
    tensors = reader.torch.load(small)
    assert sorted(tensors) == sorted(small_gpt_state_dict())
    for name, tensor in expected.items():
        assert tensors[name].dtype == tensor.dtype and tensors[name].stride() == tensor.stride()
        assert torch.equal(tensors[name], tensor), name

    def storage(name: str) -> int:
        return tensors[name].untyped_storage().data_ptr()

    assert storage("lm_head.weight") == storage("transformer.wte.weight")  # tied, as saved
    assert storage("transformer.proj_t.weight") == storage("transformer.proj.weight")  # a view
    assert storage("transformer.proj_head.weight") == storage("transformer.proj.weight")  # a slice
    assert not tensors["transformer.proj_t.weight"].is_contiguous()
    chosen = reader.torch.load(small, names=["lm_head.weight", "transformer.h.2.mlp.c_fc.weight"])
    assert list(chosen) == ["lm_head.weight", "transformer.h.2.mlp.c_fc.weight"]
    assert torch.equal(chosen["transformer.h.2.mlp.c_fc.weight"], expected["transformer.h.2.mlp.c_fc.weight"])


async def test_storage_entries_name_their_shard(small):
    shards = weight_map(small)
    async with reader.open_archive(small) as ar:
        for info in ar.tensors():
            assert info.storage.entry.startswith(shards[info.name] + "!/")
        assert ar.layout("lm_head.weight").storage.entry == ar.layout("transformer.wte.weight").storage.entry
        assert (
            ar.layout("transformer.wpe.weight").storage.entry
            != ar.layout("transformer.wte.weight").storage.entry
        )


async def test_selection_prefix_names_and_errors(small):
    expected = truth(small)
    async with reader.open_archive(small) as ar:
        block = await ar.load(prefix="transformer.h.1.")
        assert sorted(block) == sorted(n for n in expected if n.startswith("transformer.h.1."))
        many = await ar.read_many(["transformer.h.2.ln_1.bias", "lm_head.weight"], order="contiguous")
        assert list(many) == ["transformer.h.2.ln_1.bias", "lm_head.weight"]
        assert many["lm_head.weight"] == raw(expected["lm_head.weight"])
        chunks = [
            bytes(c) async for c in ar.tensor("lm_head.weight", order="contiguous").chunks(chunk_size=1000)
        ]
        assert b"".join(chunks) == raw(expected["lm_head.weight"])
        buffer = np.empty(expected["transformer.wpe.weight"].numel(), np.float32)
        await ar.tensor("transformer.wpe.weight").read_into(buffer)
        assert buffer.tobytes() == raw(expected["transformer.wpe.weight"])
        assert ar.tensor("lm_head.weight", order="contiguous").length == expected["lm_head.weight"].nbytes
        with pytest.raises(reader.TensorNotFound, match=r"lm_head\.weight"):
            ar.layout("lm_head.weigth")
        with pytest.raises(reader.TensorNotFound):
            await ar.load(names=["nope"])
        with pytest.raises(reader.ModelNotFound):
            ar.tensors(model="model")
        with pytest.raises(reader.FileNotFound):
            ar.executorch_file("model.pte")
        with pytest.raises(reader.ArchiveFormatError, match="no exported program"):
            await ar.graph()


async def test_iter_load_yields_each_name_once_as_shards_land(small):
    expected = truth(small)
    async with reader.open_archive(small) as ar:
        seen = {}
        async for name, array in ar.iter_load(prefix="transformer.h."):
            assert name not in seen
            seen[name] = array
        assert sorted(seen) == sorted(n for n in expected if n.startswith("transformer.h."))
        for name, array in seen.items():
            same_array(array, expected[name])
        async for _name, _array in ar.iter_load():  # stopping early leaves nothing running
            break
        with pytest.raises(reader.TensorNotFound):
            async for _ in ar.iter_load(names=["lm_head.weight", "nope"]):
                pass
        assert await ar.read("lm_head.weight", order="contiguous") == raw(expected["lm_head.weight"])


async def test_revalidate_and_version_cover_every_shard(small, tmp_path):
    index = copy_checkpoint(small, tmp_path / "copy")
    async with reader.open_archive(index) as ar:
        version, identity = source_version(ar.source), ar.source.identity
        assert await ar.revalidate()
        shard = index.parent / shard_file(index, 4)
        state = torch.load(shard, weights_only=True)
        name = next(iter(state))
        state[name] = state[name] + 1
        torch.save(state, shard)  # one shard replaced by a new version
        assert not await ar.revalidate()
    async with reader.open_archive(index) as again:
        assert again.source.identity != identity and source_version(again.source) != version
        assert await again.read(name, order="contiguous") == raw(state[name])


# -- missing and refused shards ----------------------------------------------------------------------


async def test_a_missing_shard_is_file_not_found_naming_it(small, tmp_path):
    index = copy_checkpoint(small, tmp_path / "copy")
    missing = shard_file(index, 2)
    os.remove(index.parent / missing)
    with pytest.raises(reader.FileNotFound, match=missing):
        await reader.open_archive(index)
    with pytest.raises(reader.FileNotFound, match=missing):
        reader.load(index, names=names_in(small, 1))


async def test_a_name_the_shard_does_not_hold_is_a_format_error(small, tmp_path):
    index = copy_checkpoint(small, tmp_path / "copy")
    document = json.loads(index.read_text())
    document["weight_map"]["lm_head.weight"] = shard_file(index, 3)  # it is in shard 1
    index.write_text(json.dumps(document))
    with pytest.raises(
        reader.ArchiveFormatError, match=f"'lm_head.weight' in shard '{shard_file(index, 3)}'"
    ):
        await reader.open_archive(index)


@pytest.mark.parametrize(
    "shard",
    ["../outside.bin", "/etc/passwd", "https://example.com/x.bin", "sub/x.bin", "..\\x.bin", "..", "C:x.bin",
     "other.bin.index.json", ""],
)  # fmt: skip
async def test_shards_outside_the_index_folder_are_refused(small, tmp_path, shard):
    index = copy_checkpoint(small, tmp_path / "copy")
    shutil.copy(index.parent / shard_file(index, 1), tmp_path / "outside.bin")  # would open, if asked
    document = json.loads(index.read_text())
    document["weight_map"]["lm_head.weight"] = shard
    index.write_text(json.dumps(document))
    with pytest.raises(reader.ArchiveFormatError, match="weight_map names"):
        await reader.open_archive(index)


@pytest.mark.parametrize(
    "text, match",
    [("not json", "not a JSON"), ("[]", "weight_map"), ('{"weight_map": {}}', "weight_map"),
     ('{"weight_map": {"a": 3}}', "not a name")],
)  # fmt: skip
async def test_malformed_indexes_are_format_errors(tmp_path, text, match):
    index = tmp_path / INDEX_NAME
    index.write_text(text)
    with pytest.raises(reader.ArchiveFormatError, match=match):
        await reader.open_archive(index)


# -- remote: only the shards a selection needs --------------------------------------------------------


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
