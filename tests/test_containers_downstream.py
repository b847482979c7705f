"""Checkpoints and AOTInductor packages through everything downstream: the service's routes
(layout, data, safetensors), the CLI's ls/layout/get, and its exit status when nothing is readable."""

from __future__ import annotations

import json

import pytest

import reader
from testing.cli import cli
from testing.paths import CONTAINER_VERSIONS as VERSIONS
from testing.paths import CONTAINERS
from testing.service import in_process, make_app
from testing.torch_oracle import needs_torch

pytestmark = pytest.mark.emulator

VERSION = VERSIONS[-1]
CHECKPOINT = CONTAINERS / VERSION / "checkpoint.pt"
AOTI = CONTAINERS / VERSION / "aoti_pickle.pt2"
MIXED = CONTAINERS / VERSION / "mixed.pt2"
SO_ONLY = CONTAINERS / VERSION / "aoti_so.pt2"


@pytest.fixture
async def client():
    app = make_app([f"ckpt={CHECKPOINT}", f"aoti={AOTI}", f"mixed={MIXED}"])
    async with in_process(app) as client:
        yield client


async def test_service_lists_and_serves_checkpoint_tensors(client) -> None:
    listing = (await client.get("/archives/ckpt/tensors")).json()
    assert listing["models"] == ["checkpoint"]
    names = {t["name"]: t for t in listing["tensors"]}
    assert names["epoch"]["kind"] == "custom_object"
    layout = (await client.get("/archives/ckpt/tensors/model.conv.weight/layout")).json()
    assert layout["dim_order"] == [0, 2, 3, 1]
    async with reader.open_archive(CHECKPOINT) as ar:
        for name in ("model.conv.weight", "extras.strided", "extras.bf16"):
            for order in ("default", "contiguous"):
                response = await client.get(f"/archives/ckpt/tensors/{name}/data", params={"order": order})
                assert response.status_code == 200
                assert response.content == await ar.read(name, order=order)
    refused = await client.get("/archives/ckpt/tensors/epoch/data")
    assert refused.status_code >= 400 and "error" in refused.json()


async def test_service_serves_aoti_weights_by_model(client) -> None:
    listing = (await client.get("/archives/aoti/tensors")).json()
    assert listing["models"] == ["aoti/model"]
    response = await client.get("/archives/aoti/tensors/scale/data", params={"model": "aoti/model"})
    async with reader.open_archive(AOTI) as ar:
        assert response.content == await ar.read("scale")
    assert response.headers["x-tensor-dtype"] == "float16"
    mixed = (await client.get("/archives/mixed/tensors")).json()
    assert mixed["models"] == ["model"]
    described = {a["id"]: a for a in (await client.get("/archives")).json()["archives"]}
    assert described["ckpt"]["container"] == "checkpoint"
    assert described["mixed"]["container"] == "pt2+aoti"
    assert "generated C++" in described["mixed"]["unreadable"]["aoti/model"]


@needs_torch
async def test_safetensors_of_a_checkpoint_loads_with_safetensors(client) -> None:
    import torch
    from safetensors.torch import load

    response = await client.get("/archives/ckpt/safetensors", params={"prefix": "model."})
    assert response.status_code == 200
    loaded = load(response.content)
    state = torch.load(CHECKPOINT, weights_only=True)["model"]
    assert set(loaded) == {f"model.{key}" for key in state}
    for key, value in state.items():
        assert torch.equal(loaded[f"model.{key}"], value.contiguous())


def test_cli_ls_get_layout_on_a_checkpoint(tmp_path) -> None:
    listed = cli("ls", CHECKPOINT, "--json")
    assert listed.returncode == 0, listed.stderr
    body = json.loads(listed.stdout)
    assert body["container"] == "checkpoint"
    assert "model.fc.weight" in {t["name"] for t in body["tensors"]}
    layout = cli("layout", CHECKPOINT, "extras.transposed")
    assert json.loads(layout.stdout)["strides"] == [1, 8]
    out = tmp_path / "fc.bin"
    got = cli("get", CHECKPOINT, "model.fc.weight", "-o", out)
    assert got.returncode == 0, got.stderr
    assert out.stat().st_size == 6 * 4 * 4


def test_cli_ls_exits_non_zero_when_nothing_is_readable() -> None:
    so_only = cli("ls", SO_ONLY)
    assert so_only.returncode == 1
    assert "AOTInductor" in so_only.stderr and "wrapper.cpp" in so_only.stderr
    mixed = cli("ls", MIXED)
    assert mixed.returncode == 0
    assert "fc.weight" in mixed.stdout and "aoti/model" in mixed.stderr
    legacy = cli("ls", CONTAINERS / VERSION / "legacy.pt")
    assert legacy.returncode == 1 and "legacy torch.save" in legacy.stderr
