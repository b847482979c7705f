"""A sharded checkpoint's index served (`pt2serve serve x=.../pytorch_model.bin.index.json`) and listed
(`pt2serve ls`, `layout`, `get`), run for real."""

from __future__ import annotations

import io
import json
import os
import pathlib
import shutil
from urllib.parse import quote

import httpx
import numpy as np
import pytest

import reader
from reader.blocking.sync import run_sync
from testing.cli import cli, serve
from testing.fixtures.make_sharded import write_sharded
from testing.service import in_process, make_app

pytestmark = pytest.mark.emulator

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> pathlib.Path:
    return write_sharded(tmp_path_factory.mktemp("sharded-service") / "gpt")


def truth(index: pathlib.Path) -> dict[str, torch.Tensor]:
    weight_map = json.loads(index.read_text())["weight_map"]
    shards = {s: torch.load(index.parent / s, weights_only=True) for s in set(weight_map.values())}
    return {name: shards[shard][name] for name, shard in weight_map.items()}


def raw(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


async def layouts(index: pathlib.Path) -> list[dict]:
    async with reader.open_archive(index) as ar:
        return [t.to_dict() for t in ar.tensors()]


async def test_service_serves_an_index_in_process(index):
    expected = truth(index)
    listed = await layouts(index)
    app = make_app([f"x={index}"])
    async with in_process(app) as client:
        opened = app.state.registry.slots["x"].current
        assert opened.ahead is not None  # local files: every digest computed after opening, as for one file
        await opened.ahead
        assert opened.digests.cached(("checkpoint", "lm_head.weight", "default", "raw"))
        archives = (await client.get("/archives")).json()
        (described,) = archives["archives"] if isinstance(archives, dict) else archives
        assert described["status"] == "open" and described["container"] == "sharded-checkpoint"
        assert described["tensors"] == len(expected)
        body = (await client.get("/archives/x/tensors")).json()
        assert body["models"] == ["checkpoint"]
        assert [{key: t[key] for key in listed[0]} for t in body["tensors"]] == listed
        for name, tensor in expected.items():
            layout = (await client.get(f"/archives/x/tensors/{quote(name)}/layout")).json()
            assert layout["sizes"] == list(tensor.shape) and layout["strides"] == list(tensor.stride())
            data = await client.get(f"/archives/x/tensors/{quote(name)}/data", params={"order": "contiguous"})
            assert data.status_code == 200 and data.content == raw(tensor), name
            assert data.headers["x-tensor-shape"] == ",".join(map(str, tensor.shape))
        name = "transformer.wte.weight"
        npy = await client.get(f"/tensors/{name}/data", params={"format": "npy"})
        assert np.array_equal(np.load(io.BytesIO(npy.content)), expected[name].numpy())
        ranged = await client.get(f"/tensors/{name}/data", headers={"Range": "bytes=4-11"})
        assert ranged.status_code == 206 and ranged.content == raw(expected[name])[4:12]
        etag = (await client.get(f"/tensors/{name}/data")).headers["etag"]
        again = await client.get(f"/tensors/{name}/data", headers={"If-None-Match": etag})
        assert again.status_code == 304
        manifest = await client.get("/archives/x/manifest")
        assert manifest.status_code == 200, manifest.text
        missing = await client.get("/tensors/transformer.nope/layout")
        assert missing.status_code == 404 and missing.json()["error"]["code"]


async def test_service_lists_a_missing_shard_as_an_archive_error(index, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(index.parent, copy)
    shard = sorted(p.name for p in copy.glob("*.bin"))[1]
    os.remove(copy / shard)
    async with in_process(make_app([f"x={copy / index.name}"])) as client:
        answer = await client.get("/tensors")
        assert answer.status_code == 503
        assert shard in answer.json()["error"]["message"]


def test_pt2serve_serve_an_index(index):
    expected = truth(index)
    with serve([f"x={index}"]) as base:
        listed = httpx.get(f"{base}/tensors", timeout=30).json()
        assert sorted(t["name"] for t in listed["tensors"]) == sorted(expected)
        name = "transformer.h.1.mlp.c_fc.weight"  # bfloat16
        layout = httpx.get(f"{base}/tensors/{name}/layout", timeout=30).json()
        assert layout["dtype"] == "bfloat16"
        data = httpx.get(f"{base}/tensors/{name}/data", params={"order": "contiguous"}, timeout=30)
        assert data.status_code == 200 and data.content == raw(expected[name])


def test_pt2serve_ls_layout_get_of_an_index(index, tmp_path):
    expected = truth(index)
    listed = cli("ls", index, "--json")
    assert listed.returncode == 0, listed.stderr
    document = json.loads(listed.stdout)
    assert document["container"] == "sharded-checkpoint" and document["models"] == ["checkpoint"]
    assert document["tensors"] == run_sync(lambda: layouts(index))
    table = cli("ls", index)
    assert table.returncode == 0 and "lm_head.weight" in table.stdout and "bfloat16" in table.stdout
    layout = cli("layout", index, "transformer.proj_t.weight")
    assert layout.returncode == 0 and json.loads(layout.stdout)["strides"] == [1, 24]
    out = tmp_path / "proj_t.npy"
    got = cli("get", index, "transformer.proj_t.weight", "-o", out, "--format", "npy")
    assert got.returncode == 0, got.stderr
    assert np.array_equal(np.load(out), expected["transformer.proj_t.weight"].numpy())
    missing = cli("layout", index, "transformer.nope")
    assert missing.returncode == 1 and missing.stderr.startswith("pt2serve: TensorNotFound:")


def test_an_index_without_an_id_is_named_after_its_checkpoint() -> None:
    from app.settings import parse_archive_specs

    specs = parse_archive_specs(
        ["/m/pytorch_model.bin.index.json", "s3://b/gpt2.pt2", "hf://o/r@v1/x.index.json"]
    )
    assert [spec.id for spec in specs] == ["pytorch_model", "gpt2", "x"]
