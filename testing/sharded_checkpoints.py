"""What the sharded-checkpoint tests read about a checkpoint as transformers writes it: its weight map, the
names and file of each shard, torch.load's tensors (torch is the oracle: without it the importing test
module is skipped), a tensor's bytes, a copy of the checkpoint elsewhere, its layouts as listed, and a
small GPT's checkpoint (the fixture index)."""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

import reader
from testing.fixtures.make_sharded import write_sharded

torch = pytest.importorskip("torch")


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


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> pathlib.Path:
    """A small GPT's sharded checkpoint, written once per test module."""
    return write_sharded(tmp_path_factory.mktemp("sharded-service") / "gpt")


async def layouts(index: pathlib.Path) -> list[dict]:
    async with reader.open_archive(index) as ar:
        return [t.to_dict() for t in ar.tensors()]
