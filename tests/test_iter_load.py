"""Archive.iter_load / reader.torch.iter_load: the tensors of a load as their storages land.

The same names and values as `load`; a tensor is handed over once its storage is in and checked
(while the rest of the body is still on its way), never written again, and never if its CRC-32
fails; leaving the loop early leaves nothing running.
"""

from __future__ import annotations

import asyncio
import contextlib
import zipfile

import numpy as np
import pytest

import reader
from reader.sources import HttpOptions
from testing.faultserver import FaultServer, StallAfter
from testing.load_cases import CASE_IDS, CASES, PARALLEL, big_archive  # noqa: F401 - the fixture
from testing.torch_oracle import needs_torch

pytestmark = pytest.mark.emulator

ONE_STREAM = HttpOptions(parallel_parts=1, read_timeout=120, max_attempts=1)


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


async def test_tensors_are_handed_over_while_the_body_still_runs(big_archive) -> None:  # noqa: F811
    """One connection; the server stalls the load's body after 4 MiB: the tensors in those bytes
    (1.5 MiB each) come out of the loop although the rest never arrives."""
    path, tensors = big_archive
    async with FaultServer() as server:
        server.put("/big.pt2", path.read_bytes())
        before = asyncio.all_tasks()
        async with reader.open_archive(server.url("/big.pt2"), http_options=ONE_STREAM) as archive:
            server.faults.append(StallAfter(nbytes=4 << 20, method="GET", times=None))
            async with contextlib.aclosing(archive.iter_load()) as landing:
                first = [
                    await asyncio.wait_for(anext(landing), 60) for _ in range(2)
                ]  # a guard, not a timing
        assert server.faults[0].applied == 1
        assert [name for name, _ in first] == ["layer0.weight", "layer1.weight"]
        for name, array in first:
            assert array.tobytes() == tensors[name]
        await asyncio.sleep(0.05)
        assert asyncio.all_tasks() - before == set()  # leaving the loop cancelled the reads


async def test_parallel_parts_hand_over_final_arrays(big_archive) -> None:  # noqa: F811
    """Parts land in any order; what was handed over is never written again."""
    path, tensors = big_archive
    async with FaultServer() as server:
        server.put("/big.pt2", path.read_bytes())
        async with reader.open_archive(server.url("/big.pt2"), http_options=PARALLEL) as archive:
            seen = {}
            landed = {}
            async for name, array in archive.iter_load():
                seen[name] = array.tobytes()  # what it held when handed over
                landed[name] = array
            assert archive.stats["data"]["bytes"] < path.stat().st_size  # the same plan: each byte once
    assert seen == tensors
    assert {name: array.tobytes() for name, array in landed.items()} == tensors


async def test_a_corrupt_storage_is_never_handed_over(tmp_path, big_archive) -> None:  # noqa: F811
    path, _ = big_archive
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("synthetic/data/weights/weight_2")
    data[info.header_offset + 200_000] ^= 0xFF
    async with FaultServer() as server:
        server.put("/big.pt2", bytes(data))
        async with reader.open_archive(server.url("/big.pt2"), http_options=ONE_STREAM) as archive:
            names = []
            with pytest.raises(reader.IntegrityError, match="weight_2"):
                async for name, _ in archive.iter_load():
                    names.append(name)
    assert "layer2.weight" not in names
    assert set(names) <= {"layer0.weight", "layer1.weight"}  # what lies before it, if checked first


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
