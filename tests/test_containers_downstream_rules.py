"""Checkpoints and AOTInductor packages through the service's routes in process (layout, data,
safetensors; no socket). The CLI's ls/layout/get and its exit status, in a subprocess, are in
test_containers_downstream.py."""

from __future__ import annotations

import pytest

import reader
from testing.container_truth import CHECKPOINT, MIXED, VERSION
from testing.paths import CONTAINERS
from testing.service import in_process, make_app
from testing.torch_oracle import needs_torch

pytestmark = pytest.mark.unit


AOTI = CONTAINERS / VERSION / "aoti_pickle.pt2"


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
