"""Sharded checkpoints (`pytorch_model.bin.index.json` + torch.save shards, written as transformers
writes them) opened locally: one archive over the shards, equal to torch.load of each shard, reading
only the shards a selection needs. No socket, no subprocess; over HTTP and from S3 in test_sharded.py."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import numpy as np
import pytest

import reader
import reader.torch
from reader.versions import source_version
from testing.fixtures.make_sharded import INDEX_NAME, small_gpt_state_dict, write_sharded
from testing.sharded_checkpoints import (
    copy_checkpoint,
    names_in,
    raw,
    same_array,
    shard_file,
    torch,
    truth,
    weight_map,
)

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> pathlib.Path:
    """Five small shards (every file fits one open's tail)."""
    return write_sharded(tmp_path_factory.mktemp("sharded") / "gpt")


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
