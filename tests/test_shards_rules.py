"""Shards for tensor parallelism in this process: `load(..., shard=reader.Shard(rank, world_size, dims))`
over local archives. Each block equals the torch.chunk-style block of torch's own tensor (ceil(size /
world), the last shorter or empty); the blocks of all ranks put together are the whole; unmatched tensors
are whole. What a rank reads from S3 is in test_shards.py."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reader
from testing.shard_blocks import block, matrices
from testing.torch_oracle import needs_torch

ROWS, COLUMNS = 10, 6  # 10 rows over 4 ranks: 3, 3, 3, 1; over 3: 4, 4, 2

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[pathlib.Path, dict]:
    """A torch-exported module: linears (one bfloat16), a tied embedding, a 3-D buffer, a transposed
    (non-dense) buffer; with torch's own tensors."""
    torch = pytest.importorskip("torch")

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(ROWS, COLUMNS)
            self.up = torch.nn.Linear(COLUMNS, 2 * ROWS)
            self.down = torch.nn.Linear(2 * ROWS, COLUMNS, bias=False).to(torch.bfloat16)
            self.head = torch.nn.Linear(COLUMNS, ROWS, bias=False)
            self.head.weight = self.embed.weight
            self.register_buffer("cube", torch.arange(5 * 7 * 3, dtype=torch.float32).reshape(5, 7, 3))
            self.register_buffer(
                "flipped", torch.arange(ROWS * COLUMNS, dtype=torch.int32).reshape(ROWS, COLUMNS).t()
            )

        def forward(self, x):
            h = self.up(self.embed(x)).to(torch.bfloat16)
            return self.head(self.down(h).float()) + self.cube.sum() + self.flipped.sum()

    torch.manual_seed(35)
    model = Model().eval()
    path = tmp_path_factory.mktemp("shards") / "model.pt2"
    torch.export.save(torch.export.export(model, (torch.zeros(2, dtype=torch.long),)), path)
    expected = {**model.state_dict(), "cube": model.cube, "flipped": model.flipped}
    return path, expected


DIMS = {"up.weight": 0, "down.weight": 1, "embed.weight": 1, "head.*": 0, "cube": 2, "flipped": 1}


def _numpy(tensor) -> np.ndarray:
    import torch

    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16)
    return tensor.numpy()


def _raw(array: np.ndarray) -> np.ndarray:
    return array.view(np.uint16) if array.dtype.name == "bfloat16" else array


@needs_torch
@pytest.mark.parametrize("world", [1, 3, 4])
def test_blocks_equal_torch_blocks_and_put_together_make_the_whole(exported, world: int) -> None:
    path, expected = exported
    ranks = [reader.load(path, shard=reader.Shard(rank, world, DIMS)) for rank in range(world)]
    for name, tensor in expected.items():
        truth = _numpy(tensor)
        dim = reader.Shard(0, world, DIMS).dim_of(name)
        for rank, arrays in enumerate(ranks):
            got = _raw(arrays[name])
            want = truth if dim is None else block(truth, rank, world, dim)
            assert got.shape == want.shape, (name, rank)
            assert np.array_equal(got, want), (name, rank)
        if dim is not None:
            union = np.concatenate([_raw(arrays[name]) for arrays in ranks], axis=dim)
            assert np.array_equal(union, truth), name
    assert list(ranks[0]) == list(reader.load(path))  # the same names, in the same order


@needs_torch
def test_world_size_one_is_the_whole_load(exported) -> None:
    path, _ = exported
    whole = reader.load(path)
    one = reader.load(path, shard=reader.Shard(0, 1, DIMS))
    assert {n: a.tobytes() for n, a in one.items()} == {n: a.tobytes() for n, a in whole.items()}
    assert np.shares_memory(one["embed.weight"], one["head.weight"])  # whole: still one storage


@needs_torch
def test_unmatched_tensors_are_whole_and_the_first_pattern_wins(exported) -> None:
    path, expected = exported
    shard = reader.Shard(1, 2, {"up.w*": 1, "up.weight": 0, "*.weight": 0})
    arrays = reader.load(path, shard=shard)
    up = _numpy(expected["up.weight"])
    assert np.array_equal(arrays["up.weight"], block(up, 1, 2, 1))  # "up.w*" came first
    assert np.array_equal(arrays["embed.weight"], block(_numpy(expected["embed.weight"]), 1, 2, 0))
    for name in ("up.bias", "cube", "flipped"):  # no pattern: whole
        assert np.array_equal(arrays[name], _numpy(expected[name])), name


NAMES = ["a.weight", "a.bias", "h.0.mlp.c_fc.weight", "x[1]", "x1", "b*", "bb", "lm_head.weight"]


PATTERNS = [*NAMES, "*.weight", "h.*", "*bias", "?.weight", "[ab]*", "x[[]1]", "*"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PATTERNS), st.integers(0, 2)), max_size=8))
def test_the_first_pattern_that_matches_decides_whatever_its_kind(pairs) -> None:
    """Names without wildcards are looked up, patterns matched: the same answer as matching in order."""
    dims = dict(pairs)
    shard = reader.Shard(0, 2, dims)
    for name in NAMES:
        first = next((dim for pattern, dim in dims.items() if fnmatch.fnmatchcase(name, pattern)), None)
        assert shard.dim_of(name) == first, (dims, name)


@needs_torch
def test_torch_load_and_iter_load_take_the_shard(exported) -> None:
    import torch

    import reader.torch

    path, expected = exported
    shard = reader.Shard(2, 3, DIMS)
    tensors = reader.torch.load(path, shard=shard)
    for name, tensor in expected.items():
        dim = shard.dim_of(name)
        want = tensor if dim is None else tensor.split(-(-tensor.shape[dim] // 3), dim)[2]
        assert tensors[name].dtype == tensor.dtype
        assert torch.equal(tensors[name], want), name

    async def landed() -> dict:
        async with reader.open_archive(path) as archive:
            arrays = {name: array async for name, array in archive.iter_load(shard=shard)}
            torched = {name: tensor async for name, tensor in reader.torch.iter_load(archive, shard=shard)}
        return arrays, torched

    arrays, torched = asyncio.run(landed())
    assert {n: a.tobytes() for n, a in arrays.items()} == {
        n: a.tobytes() for n, a in reader.load(path, shard=shard).items()
    }
    assert all(torch.equal(torched[name], tensors[name]) for name in tensors)


@needs_torch
def test_contiguous_order_and_copy_apply_to_blocks(exported) -> None:
    path, expected = exported
    shard = reader.Shard(0, 2, {"flipped": 0})
    default = reader.load(path, shard=shard)
    contiguous = reader.load(path, shard=shard, order="contiguous")
    want = block(_numpy(expected["flipped"]), 0, 2, 0)
    assert np.array_equal(default["flipped"], want) and np.array_equal(contiguous["flipped"], want)
    assert contiguous["flipped"].flags.c_contiguous


@needs_torch
def test_a_dim_out_of_range_is_a_clear_error(exported) -> None:
    path, _ = exported
    with pytest.raises(reader.InvalidShard, match=r"'up.bias' has 1 dims .* along dim 1"):
        reader.load(path, shard=reader.Shard(0, 2, {"up.*": 1}))
    with pytest.raises(reader.InvalidShard, match="cube"):
        reader.load(path, shard=reader.Shard(0, 2, {"cube": -4}))
    assert reader.load(path, shard=reader.Shard(0, 2, {"cube": -1}))["cube"].shape == (5, 7, 2)


def test_a_shard_is_checked_when_made() -> None:
    for rank, world in ((2, 2), (-1, 2), (0, 0)):
        with pytest.raises(reader.InvalidShard):
            reader.Shard(rank, world)
    with pytest.raises(reader.InvalidShard):
        reader.Shard(0, 2, {"a": "0"})
    with pytest.raises(TypeError, match="Shard"):
        reader.load("unused.pt2", shard=(0, 2))
    assert isinstance(reader.InvalidShard("x"), ValueError)


async def test_leaving_a_sharded_iter_load_early_leaves_nothing_running(tmp_path) -> None:
    path, truth = matrices(tmp_path)
    before = asyncio.all_tasks()
    shard = reader.Shard(3, 4, {"layer*": 0})
    async with (
        reader.open_archive(path) as archive,
        contextlib.aclosing(archive.iter_load(shard=shard)) as landing,
    ):
        name, array = await anext(landing)
        assert np.array_equal(array, truth[name] if name == "norm" else block(truth[name], 3, 4, 0))
    await asyncio.sleep(0.01)
    assert asyncio.all_tasks() - before == set()
