"""Slices through the library in this process: `read_numpy(name, index=...)` equals NumPy's `full[index]`
on every fixture read locally, reading only the byte runs the slice covers; index errors, views, ties
and dtypes. No socket, no subprocess; over HTTP and from S3 in test_slices.py."""

from __future__ import annotations

import asyncio
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reader
from testing import slice_cases
from testing.paths import ARCHIVES
from testing.slice_cases import (
    COLS,
    FIXTURES,
    check_fixture,
    fixed_indices,
    header_guess,
    local_arrays,
    same,
)
from testing.torch_oracle import needs_torch
from testing.zipbytes import write_pt2

embedding = slice_cases.embedding  # the fixture: a 4 MiB embedding archive and its array

pytestmark = pytest.mark.unit


@st.composite
def _index_for(draw, shape: tuple[int, ...]):
    entries: list[object] = []
    for size in shape[: draw(st.integers(0, len(shape)))]:
        if size and draw(st.booleans()):
            entries.append(draw(st.integers(-size, size - 1)))
        else:
            bound = st.one_of(st.none(), st.integers(-size - 2, size + 2))
            entries.append(slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, 3, -1, -2]))))
    if draw(st.booleans()):
        entries.insert(draw(st.integers(0, len(entries))), Ellipsis)
    return tuple(entries)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_slices_equal_numpy_on_every_fixture(data) -> None:
    fixture = data.draw(st.sampled_from(FIXTURES))
    arrays = local_arrays(fixture)
    if not arrays:
        return
    key = data.draw(st.sampled_from(sorted(arrays)))
    full = arrays[key]
    indices = [data.draw(_index_for(full.shape)) for _ in range(4)]

    async def sliced() -> list[np.ndarray | Exception]:
        results: list[np.ndarray | Exception] = []
        async with reader.open_archive(ARCHIVES / fixture) as ar:
            for index in indices:
                try:
                    results.append(await ar.read_numpy(key[1], model=key[0], index=index))
                except IndexError as error:
                    results.append(error)
        return results

    for index, got in zip(indices, asyncio.run(sliced())):
        try:
            want = full[index]
        except IndexError:  # an index past a dim's end (the `...` moved it): the same error
            assert isinstance(got, IndexError)
            continue
        assert isinstance(got, np.ndarray), got
        same(got, want)


@pytest.mark.parametrize("fixture", FIXTURES)
async def test_fixed_slices_equal_numpy_locally(fixture: str) -> None:
    async with reader.open_archive(ARCHIVES / fixture) as ar:
        assert await check_fixture(ar, fixture) == sum(
            len(fixed_indices(a.shape)) for a in local_arrays(fixture).values()
        )


async def test_views_ties_and_dtypes() -> None:
    layouts = local_arrays("layouts.pt2")
    async with reader.open_archive(ARCHIVES / "layouts.pt2") as ar:
        strided = ar.layout("strided")
        assert not strided.dense  # a non-dense view: strides (6, 2) over its payload
        same(await ar.read_numpy("strided", index=np.s_[1:, ::-2]), layouts["model", "strided"][1:, ::-2])
        # tied names: one payload, each name its own view of it
        assert ar.layout("view_a").storage.entry == ar.layout("view_b").storage.entry
        for name in ("lin1.weight", "lin2.weight", "view_a", "view_b", "transposed", "conv.weight"):
            full = layouts["model", name]
            same(await ar.read_numpy(name, index=np.s_[-1:, ...]), full[-1:, ...])
        same(
            await ar.read_numpy("conv.weight", index=np.s_[2, :, 1, ::2]),
            layouts["model", "conv.weight"][2, :, 1, ::2],
        )
    dtypes = local_arrays("dtypes.pt2")
    async with reader.open_archive(ARCHIVES / "dtypes.pt2") as ar:
        for name in (
            "t_bfloat16",
            "t_float8_e4m3fn",
            "t_float8_e5m2",
            "t_float8_e8m0fnu",
            "t_complex32",
            "t_bool",
        ):
            got = await ar.read_numpy(name, index=np.s_[:, ::-2])
            assert got.dtype.name == dtypes["model", name].dtype.name
            same(got, dtypes["model", name][:, ::-2])


async def test_index_errors() -> None:
    async with reader.open_archive(ARCHIVES / "layouts.pt2") as ar:
        with pytest.raises(IndexError):
            await ar.read_numpy("view_b", index=3)  # sizes (3, 5)
        with pytest.raises(IndexError):
            await ar.read_numpy("view_b", index=(0, -6))
        with pytest.raises(IndexError):
            await ar.read_numpy("scalar", index=0)
        with pytest.raises(TypeError):
            await ar.read_numpy("view_b", index=[0, 1])
        with pytest.raises(ValueError):
            await ar.read("view_b", index=np.s_[::0])
        same(await ar.read_numpy("empty", index=np.s_[:, 1]), np.zeros((0,), np.float32))
    async with reader.open_archive(ARCHIVES / "zero_payload.pt2") as ar:  # a zero-byte payload: zeros
        full = local_arrays("zero_payload.pt2")
        for (model, name), array in full.items():
            same(await ar.read_numpy(name, model=model, index=np.s_[::-1]), array[::-1])


ROW = COLS * 4


async def test_a_row_reads_the_row_and_its_local_header_only(embedding) -> None:
    path, full = embedding
    async with reader.open_archive(path) as ar:
        before = ar.stats.get("data", {"requests": 0, "bytes": 0})
        same(await ar.read_numpy("emb", index=1500), full[1500])
        data = ar.stats["data"]
        assert data["bytes"] - before["bytes"] <= ROW + header_guess(ar, "emb")
        assert data["requests"] - before["requests"] == 2  # the local header, then the row
        # the data offset is known now: the next slice is one read of exactly its bytes
        same(await ar.read_numpy("emb_tied", index=np.s_[-3:-1]), full[-3:-1])
        assert ar.stats["data"]["bytes"] - data["bytes"] == 2 * ROW
        assert ar.stats["data"]["requests"] - data["requests"] == 1


async def test_a_slice_near_the_start_reads_header_and_rows_in_one_request(embedding) -> None:
    path, full = embedding
    async with reader.open_archive(path) as ar:
        same(await ar.read_numpy("emb", index=np.s_[2:4, 100:]), full[2:4, 100:])
        assert ar.stats["data"]["requests"] == 1
        assert ar.stats["data"]["bytes"] <= 4 * ROW + header_guess(ar, "emb")


async def test_a_slice_of_a_whole_stored_entry_is_crc_checked(tmp_path) -> None:
    values = np.arange(64, dtype=np.float32)
    path = tmp_path / "bad.pt2"
    write_pt2(path, {"w": (7, [8, 8], values.tobytes())})
    data = bytearray(path.read_bytes())
    at = bytes(data).index(values.tobytes())
    data[at + 4 * 60] ^= 0xFF  # row 7: the CRC-32 no longer matches
    path.write_bytes(bytes(data))
    async with reader.open_archive(path) as ar:
        with pytest.raises(reader.IntegrityError):
            await ar.read_numpy("w", index=np.s_[:, ::-1])  # the runs are the whole entry
        # a partial read cannot be checked against the entry's CRC-32 (lengths and header are)
        same(await ar.read_numpy("w", index=np.s_[:2]), values.reshape(8, 8)[:2])


async def test_a_slice_of_a_deflated_entry_inflates_once(tmp_path) -> None:
    values = np.arange(4096, dtype=np.float32).reshape(64, 64)
    path = tmp_path / "deflated.pt2"
    write_pt2(path, {"w": (7, [64, 64], values.tobytes())})
    deflated = tmp_path / "d.pt2"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
    async with reader.open_archive(deflated) as ar:
        assert ar.layout("w").storage.compression != "stored"
        same(await ar.read_numpy("w", index=np.s_[::9, 3::-1]), values[::9, 3::-1])
        same(await ar.read_numpy("w", index=np.s_[-1]), values[-1])  # reaches the end: CRC-checked


@needs_torch
def test_reader_torch_reads_slices(embedding) -> None:
    import torch

    import reader.torch

    path, full = embedding
    tensor = reader.torch.read(path, "emb", index=np.s_[10:20, ::-3])
    assert tensor.dtype == torch.float32
    assert torch.equal(tensor, torch.from_numpy(np.ascontiguousarray(full[10:20, ::-3])))
    whole = reader.torch.read(ARCHIVES / "dtypes.pt2", "t_bfloat16")
    part = reader.torch.read(ARCHIVES / "dtypes.pt2", "t_bfloat16", index=np.s_[1, ::2])
    assert part.dtype == torch.bfloat16 and torch.equal(part, whole[1, ::2])
    assert reader.torch.read(ARCHIVES / "layouts.pt2", "empty", index=np.s_[:, 0]).shape == (0,)
