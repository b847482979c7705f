"""A sharded checkpoint served in process (no socket): listed and served like one archive, named after its
checkpoint when the index has no id, and a missing shard listed as an archive error. Under uvicorn and
the CLI in test_sharded_service.py."""

from __future__ import annotations

import io
import os
import shutil
from urllib.parse import quote

import numpy as np
import pytest

from testing import sharded_checkpoints
from testing.service import in_process, make_app
from testing.sharded_checkpoints import (
    layouts,
    raw,
    truth,
)

index = sharded_checkpoints.index  # the fixture: a small GPT's sharded checkpoint

pytestmark = pytest.mark.unit


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


def test_an_index_without_an_id_is_named_after_its_checkpoint() -> None:
    from app.settings import parse_archive_specs

    specs = parse_archive_specs(
        ["/m/pytorch_model.bin.index.json", "s3://b/gpt2.pt2", "hf://o/r@v1/x.index.json"]
    )
    assert [spec.id for spec in specs] == ["pytorch_model", "gpt2", "x"]
