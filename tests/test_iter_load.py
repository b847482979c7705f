"""Archive.iter_load / reader.torch.iter_load: the tensors of a load as their storages land.

The same names and values as `load`, from local archives; over HTTP (a tensor handed over once its
storage is in and checked, while the rest of the body is still on its way, never written again, and
never if its CRC-32 fails): test_iter_load_remote.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import reader
from testing.load_cases import CASE_IDS, CASES, PARALLEL, big_archive  # noqa: F401 - the fixture
from testing.torch_oracle import needs_torch

pytestmark = pytest.mark.unit


async def _collect(archive: reader.Archive, model=None, **keywords) -> dict[str, np.ndarray]:
    found = {}
    async for name, array in archive.iter_load(model=model, **keywords):
        assert name not in found
        found[name] = array
    return found


@pytest.mark.parametrize(("path", "model"), CASES, ids=CASE_IDS)
async def test_iter_load_gives_what_load_gives(path, model) -> None:
    async with reader.open_archive(path) as archive:
        loaded = await archive.load(model=model)
        landed = await _collect(archive, model=model)
    assert set(landed) == set(loaded)
    for name, array in loaded.items():
        assert landed[name].dtype == array.dtype and landed[name].shape == array.shape
        assert landed[name].strides == array.strides, name  # views keep their layout
        assert np.array_equal(landed[name], array, equal_nan=True), name


async def test_tied_names_share_one_storage_when_handed_over(tmp_path) -> None:
    from testing.zipbytes import write_pt2

    data = np.arange(16, dtype=np.float32).tobytes()
    path = tmp_path / "tied.pt2"
    write_pt2(path, {"a": (7, [16], data)}, tied={"b": "a"})
    async with reader.open_archive(path) as archive:
        landed = await _collect(archive)
    assert np.shares_memory(landed["a"], landed["b"])
    assert np.array_equal(landed["b"], landed["a"])


async def test_selection_keywords_are_load_s(big_archive) -> None:  # noqa: F811
    path, tensors = big_archive
    async with reader.open_archive(path) as archive:
        assert set(await _collect(archive, names=["layer3.weight", "layer1.weight"])) == {
            "layer1.weight",
            "layer3.weight",
        }
        assert set(await _collect(archive, prefix="layer5")) == {"layer5.weight"}
        with pytest.raises(ValueError, match="order"):
            archive.iter_load(order="backwards")
        with pytest.raises(TypeError):
            archive.iter_load(prefx="layer")
        copied = await _collect(archive, copy=True)
    assert all(array.flags.writeable for array in copied.values())
    assert {name: array.tobytes() for name, array in copied.items()} == tensors


@needs_torch
async def test_torch_iter_load_gives_what_torch_load_gives(big_archive) -> None:  # noqa: F811
    import torch

    import reader.torch

    path, _ = big_archive
    whole = reader.torch.load(path)
    async with reader.open_archive(path) as archive:
        landed = {name: tensor async for name, tensor in reader.torch.iter_load(archive)}
    assert set(landed) == set(whole)
    for name, tensor in whole.items():
        assert torch.equal(landed[name], tensor)
