"""A sharded checkpoint's index served (`pt2serve serve x=.../pytorch_model.bin.index.json`) and listed
(`pt2serve ls`, `layout`, `get`), run for real. The in-process checks are in
test_sharded_service_rules.py."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from reader.blocking.sync import run_sync
from testing import sharded_checkpoints
from testing.cli import cli, serve
from testing.sharded_checkpoints import (
    layouts,
    raw,
    truth,
)

index = sharded_checkpoints.index  # the fixture: a small GPT's sharded checkpoint

pytestmark = pytest.mark.emulator


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
