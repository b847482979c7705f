"""Every tensor of every committed fixture (and of freshly generated ones) against torch's values."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import reader
from reader.pt2.dtypes import BY_NAME
from testing.checks import sha256
from testing.paths import ARCHIVES
from testing.torch_oracle import EXPECTED, needs_torch

pytestmark = pytest.mark.unit

READABLE = [name for name, spec in EXPECTED.items() if "legacy_weights" not in spec]


def _check_layout(info: reader.TensorInfo, want: dict) -> None:
    assert info.kind == want["kind"]
    assert info.pickled == want["pickled"]
    assert info.is_param == want["is_param"]
    if want["kind"] == "custom_object":
        assert info.dtype is None and info.sizes is None and not info.readable
        return
    assert info.dtype == want["dtype"]
    assert info.requires_grad == want["requires_grad"]
    assert info.storage.entry.endswith("/" + want["path_name"])
    assert info.storage.nbytes == want["payload_nbytes"]
    if want["symbolic"]:
        assert info.sizes is None and not info.readable
        return
    assert list(info.sizes) == want["sizes"]
    assert list(info.strides) == want["strides"]
    assert info.storage_offset == want["storage_offset"]
    assert info.dense == want["dense"]
    assert info.nbytes == want["nbytes"] == info.numel * info.itemsize
    if want["dense"]:
        assert list(info.dim_order) == want["dim_order"]
    else:
        assert list(info.dim_order) == list(range(len(want["sizes"])))


async def _check_archive(path: pathlib.Path, spec: dict) -> int:
    checked = 0
    async with reader.open_archive(path) as ar:
        assert ar.root == spec["root"]
        assert sorted(ar.models) == spec["models"]
        listed = {(t.model, t.name) for t in ar.tensors()}
        assert listed == {(t["model"], t["name"]) for t in spec["tensors"]}
        for want in spec["tensors"]:
            info = ar.layout(want["name"], model=want["model"])
            _check_layout(info, want)
            assert info.to_dict()["sizes"] == (None if info.sizes is None else list(info.sizes))
            if not info.readable:
                with pytest.raises(reader.UnsupportedPayload):
                    await ar.read(want["name"], model=want["model"])
                continue
            default = await ar.read(want["name"], model=want["model"])
            contiguous = await ar.read(want["name"], model=want["model"], order="contiguous")
            assert sha256(default) == want["sha256_default"], want["name"]
            assert sha256(contiguous) == want["sha256_contiguous"], want["name"]
            streamed = b"".join(
                [bytes(c) async for c in ar.tensor(want["name"], model=want["model"]).chunks(chunk_size=7)]
            )
            assert streamed == default
            checked += 1
    return checked


@pytest.mark.parametrize("name", READABLE)
async def test_committed_archive_matches_torch(name: str) -> None:
    checked = await _check_archive(ARCHIVES / name, EXPECTED[name])
    assert checked == sum(1 for t in EXPECTED[name]["tensors"] if t["sha256_default"] is not None)


@needs_torch
async def test_freshly_generated_archives_match_torch(fresh_archives) -> None:
    out, expected = fresh_archives
    for name, spec in expected.items():
        if "legacy_weights" in spec:
            continue
        await _check_archive(out / name, spec)


async def test_every_dtype_is_present_and_typed() -> None:
    async with reader.open_archive(ARCHIVES / "dtypes.pt2") as ar:
        dtypes = {t.dtype for t in ar.tensors()}
        scalar_types = {t.dtype: t.executorch_scalar_type for t in ar.tensors()}
    assert dtypes == set(BY_NAME)
    assert scalar_types["float32"] == 6 and scalar_types["bfloat16"] == 15
    assert scalar_types["float8_e4m3fn"] == 24 and scalar_types["uint64"] == 29


async def test_deflate_archive_reads_the_same_as_stored() -> None:
    async with (
        reader.open_archive(ARCHIVES / "many.pt2") as stored,
        reader.open_archive(ARCHIVES / "many_deflate.pt2") as deflated,
    ):
        names = [t.name for t in stored.tensors()]
        assert len(names) >= 1000
        assert {t.storage.compression for t in deflated.tensors()} == {"deflate"}
        for name in names[::37]:
            assert await stored.read(name) == await deflated.read(name)
            whole = await deflated.read(name)
            part = b"".join(
                [bytes(c) async for c in deflated.tensor(name).chunks(start=4, end=len(whole) - 4)]
            )
            assert part == whole[4:-4]


async def test_views_share_one_payload_and_ranges_slice_the_output() -> None:
    async with reader.open_archive(ARCHIVES / "layouts.pt2") as ar:
        a, b = ar.layout("view_a"), ar.layout("view_b")
        assert a.storage.entry == b.storage.entry
        assert (a.storage.offset, b.storage.offset) == (2 * 4, 7 * 4)
        assert ar.layout("lin1.weight").storage.entry == ar.layout("lin2.weight").storage.entry
        for name in ("view_b", "transposed", "strided", "conv.weight"):
            for order in ("default", "contiguous"):
                whole = await ar.read(name, order=order)
                for start, end in [(0, 1), (3, 17), (len(whole) - 5, len(whole)), (8, 8)]:
                    chunks = ar.tensor(name, order=order).chunks(start=start, end=end)
                    got = b"".join([bytes(c) async for c in chunks])
                    assert got == whole[start:end], (name, order, start, end)
        with pytest.raises(ValueError):
            [c async for c in ar.tensor("view_b").chunks(start=5, end=1_000_000)]
        with pytest.raises(ValueError):
            await ar.read("view_b", order="fortran")


async def test_zero_byte_payload_reads_as_zeros_and_empty_tensor_is_empty() -> None:
    async with reader.open_archive(ARCHIVES / "zero_payload.pt2") as ar:
        info = ar.layout("lin.weight")
        assert info.storage.nbytes == 0 and info.nbytes == 48
        assert await ar.read("lin.weight") == bytes(48)
        assert b"".join([bytes(c) async for c in ar.tensor("lin.weight").chunks(chunk_size=5)]) == bytes(48)
    async with reader.open_archive(ARCHIVES / "layouts.pt2") as ar:
        assert await ar.read("empty") == b""
        assert (await ar.read_numpy("empty")).shape == (0, 3)
        scalar = await ar.read_numpy("scalar")
        assert scalar.shape == () and scalar.dtype == np.float32


async def test_unsupported_payloads_are_listed_but_refused() -> None:
    async with reader.open_archive(ARCHIVES / "pickled.pt2") as ar:
        kinds = {t.name: (t.kind, t.pickled, t.readable) for t in ar.tensors()}
        assert kinds["sub"] == ("weight", True, False)
        assert kinds["custom"] == ("custom_object", True, False)
        assert kinds["symbolic"] == ("constant", False, False)
        for name, message in [("sub", "pickled"), ("custom", "custom object"), ("symbolic", "symbolic")]:
            with pytest.raises(reader.UnsupportedPayload, match=message):
                await ar.read(name)
            with pytest.raises(reader.UnsupportedPayload):
                [c async for c in ar.tensor(name).chunks()]
        assert ar.layout("custom").to_dict()["unsupported"].startswith("custom object")


async def test_legacy_layout_is_refused_clearly() -> None:
    with pytest.raises(reader.UnsupportedPayload, match="legacy"):
        await reader.open_archive(ARCHIVES / "legacy.pt2")


async def test_model_selection_and_not_found_messages() -> None:
    async with reader.open_archive(ARCHIVES / "two_models.pt2") as ar:
        assert ar.models == ["decoder", "encoder"]
        assert len(ar.tensors()) == len(ar.tensors(model="decoder")) + len(ar.tensors(model="encoder"))
        with pytest.raises(reader.ModelNotFound, match="decoder"):
            ar.layout("proj.weight")  # two models, none called "model": must name one
        with pytest.raises(reader.ModelNotFound, match="close matches: encoder"):
            ar.layout("proj.weight", model="encodr")
        assert ar.layout("proj.weight", model="encoder").sizes == (4, 6)
        with pytest.raises(reader.TensorNotFound, match=r"close matches: proj\.weight"):
            ar.layout("proj.weigth", model="encoder")
        with pytest.raises(LookupError):
            ar.layout("nothing", model="decoder")
    async with reader.open_archive(ARCHIVES / "no_weights.pt2") as ar:
        assert ar.models == ["model"] and ar.tensors() == []


async def test_read_numpy_gives_logical_values() -> None:
    async with reader.open_archive(ARCHIVES / "layouts.pt2") as ar:
        transposed = await ar.read_numpy("transposed")
        raw = np.frombuffer(await ar.read("transposed"), dtype=np.float32)
        # memory order of a transposed [6, 4] parameter is its [4, 6] storage
        assert np.array_equal(transposed, raw.reshape(4, 6).T)
        strided = await ar.read_numpy("strided")
        assert strided.shape == (4, 3)
    async with reader.open_archive(ARCHIVES / "dtypes.pt2") as ar:
        for info in ar.tensors():
            array = await ar.read_numpy(info.name)
            assert array.shape == info.sizes
            if info.dtype != "complex32":
                assert array.tobytes() == await ar.read(info.name, order="contiguous")
                assert array.dtype.itemsize == info.itemsize


async def test_shared_executorch_linear_loads(shared_linear) -> None:
    async with reader.open_archive(shared_linear) as ar:
        weight, bias = ar.layout("linear.weight"), ar.layout("linear.bias")
        assert (weight.dtype, weight.sizes, bias.sizes) == ("float32", (3, 3), (3,))
        assert weight.executorch_scalar_type == 6
        assert len(await ar.read("linear.weight")) == 36
        assert (await ar.read_numpy("linear.bias")).shape == (3,)
