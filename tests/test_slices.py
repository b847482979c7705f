"""Slices through the library: `read_numpy(name, index=...)` equals NumPy's `full[index]` on every
fixture, locally, over HTTP and from S3, reading only the byte runs the slice covers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reader
from reader import zipfmt
from reader.pt2 import slicing
from reader.sources import HttpOptions, S3Settings
from testing.faultserver import FaultServer
from testing.paths import ARCHIVES
from testing.seaweed import SeaweedS3
from testing.torch_oracle import EXPECTED, needs_torch
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator

FIXTURES = sorted(name for name, spec in EXPECTED.items() if "legacy_weights" not in spec)
FAST = HttpOptions(backoff_base=0.01, backoff_cap=0.05, read_timeout=5.0, time_budget=20.0)


async def _whole_arrays(location, **options) -> dict[tuple[str, str], np.ndarray]:
    async with reader.open_archive(location, **options) as ar:
        return {
            (info.model, info.name): await ar.read_numpy(info.name, model=info.model)
            for info in ar.tensors()
            if info.readable
        }


@functools.cache
def _local_arrays(name: str) -> dict[tuple[str, str], np.ndarray]:
    # on a thread of its own: async tests call this from inside their event loop
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _whole_arrays(ARCHIVES / name)).result()


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()


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
    arrays = _local_arrays(fixture)
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
        _same(got, want)


def _fixed_indices(shape: tuple[int, ...]) -> list[object]:
    """A step, a negative index, an empty slice, an int, `...`, a reversed dim, np.newaxis."""
    if not shape:
        return [(), ..., (None,)]
    first = shape[0]
    indices: list[object] = [np.s_[::2], np.s_[1:0], ..., np.s_[::-1], (None, ...)]
    if first:
        indices += [-1, np.s_[..., -1] if shape[-1] else np.s_[..., :0], np.s_[-first:]]
    if len(shape) > 1:
        indices += [np.s_[:, 1::2], np.s_[1:, ::-2]]
    return indices


async def _check_fixture(ar: reader.Archive, fixture: str, tensors: int | None = None) -> int:
    """The fixed slices of the fixture's first `tensors` tensors (all by default)."""
    checked = 0
    for (model, name), full in list(_local_arrays(fixture).items())[:tensors]:
        for index in _fixed_indices(full.shape):
            _same(await ar.read_numpy(name, model=model, index=index), full[index])
            raw = await ar.read(name, model=model, index=index)
            if ar.layout(name, model=model).dtype != "complex32":  # read_numpy widens complex32
                assert raw == np.ascontiguousarray(full[index]).tobytes()
            checked += 1
    return checked


@pytest.mark.parametrize("fixture", FIXTURES)
async def test_fixed_slices_equal_numpy_locally(fixture: str) -> None:
    async with reader.open_archive(ARCHIVES / fixture) as ar:
        assert await _check_fixture(ar, fixture) == sum(
            len(_fixed_indices(a.shape)) for a in _local_arrays(fixture).values()
        )


async def test_fixed_slices_equal_numpy_over_http() -> None:
    async with FaultServer() as server:
        for fixture in FIXTURES:
            server.put("/" + fixture, (ARCHIVES / fixture).read_bytes())
            async with reader.open_archive(
                server.url("/" + fixture), tail_size=4096, http_options=FAST
            ) as ar:
                await _check_fixture(ar, fixture, tensors=12)
        assert not server.errors


async def test_fixed_slices_equal_numpy_from_s3(seaweed_s3: SeaweedS3) -> None:
    settings_ = S3Settings(
        region=seaweed_s3.region,
        endpoint=seaweed_s3.endpoint,
        access_key=seaweed_s3.access_key,
        secret_key=seaweed_s3.secret_key,
    )
    for fixture in FIXTURES:
        seaweed_s3.upload(seaweed_s3.private_bucket, f"slices/{fixture}", ARCHIVES / fixture)
        location = f"s3://{seaweed_s3.private_bucket}/slices/{fixture}"
        async with reader.open_archive(location, tail_size=8192, s3_settings=settings_) as ar:
            await _check_fixture(ar, fixture, tensors=12)


async def test_views_ties_and_dtypes() -> None:
    layouts = _local_arrays("layouts.pt2")
    async with reader.open_archive(ARCHIVES / "layouts.pt2") as ar:
        strided = ar.layout("strided")
        assert not strided.dense  # a non-dense view: strides (6, 2) over its payload
        _same(await ar.read_numpy("strided", index=np.s_[1:, ::-2]), layouts["model", "strided"][1:, ::-2])
        # tied names: one payload, each name its own view of it
        assert ar.layout("view_a").storage.entry == ar.layout("view_b").storage.entry
        for name in ("lin1.weight", "lin2.weight", "view_a", "view_b", "transposed", "conv.weight"):
            full = layouts["model", name]
            _same(await ar.read_numpy(name, index=np.s_[-1:, ...]), full[-1:, ...])
        _same(
            await ar.read_numpy("conv.weight", index=np.s_[2, :, 1, ::2]),
            layouts["model", "conv.weight"][2, :, 1, ::2],
        )
    dtypes = _local_arrays("dtypes.pt2")
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
            _same(got, dtypes["model", name][:, ::-2])


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
        _same(await ar.read_numpy("empty", index=np.s_[:, 1]), np.zeros((0,), np.float32))
    async with reader.open_archive(ARCHIVES / "zero_payload.pt2") as ar:  # a zero-byte payload: zeros
        full = _local_arrays("zero_payload.pt2")
        for (model, name), array in full.items():
            _same(await ar.read_numpy(name, model=model, index=np.s_[::-1]), array[::-1])


ROWS, COLS = 2048, 512  # 4 MiB of float32
ROW = COLS * 4


@pytest.fixture(scope="module")
def embedding(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slices")
    values = np.arange(ROWS * COLS, dtype=np.float32)
    write_pt2(folder / "emb.pt2", {"emb": (7, [ROWS, COLS], values.tobytes())}, tied={"emb_tied": "emb"})
    return folder / "emb.pt2", values.reshape(ROWS, COLS)


def _header_guess(ar: reader.Archive, name: str) -> int:
    entry = ar._entries[ar.layout(name).storage.entry]
    return zipfmt.local_header_guess(entry)


async def test_a_row_reads_the_row_and_its_local_header_only(embedding) -> None:
    path, full = embedding
    async with reader.open_archive(path) as ar:
        before = ar.stats.get("data", {"requests": 0, "bytes": 0})
        _same(await ar.read_numpy("emb", index=1500), full[1500])
        data = ar.stats["data"]
        assert data["bytes"] - before["bytes"] <= ROW + _header_guess(ar, "emb")
        assert data["requests"] - before["requests"] == 2  # the local header, then the row
        # the data offset is known now: the next slice is one read of exactly its bytes
        _same(await ar.read_numpy("emb_tied", index=np.s_[-3:-1]), full[-3:-1])
        assert ar.stats["data"]["bytes"] - data["bytes"] == 2 * ROW
        assert ar.stats["data"]["requests"] - data["requests"] == 1


async def test_a_slice_near_the_start_reads_header_and_rows_in_one_request(embedding) -> None:
    path, full = embedding
    async with reader.open_archive(path) as ar:
        _same(await ar.read_numpy("emb", index=np.s_[2:4, 100:]), full[2:4, 100:])
        assert ar.stats["data"]["requests"] == 1
        assert ar.stats["data"]["bytes"] <= 4 * ROW + _header_guess(ar, "emb")


async def test_column_blocks_over_http_read_their_runs_only(embedding) -> None:
    path, full = embedding
    async with FaultServer() as server:
        server.put("/emb.pt2", path.read_bytes())
        async with reader.open_archive(server.url("/emb.pt2"), http_options=FAST) as ar:
            # every 256th row's first 16 columns: runs 512 KiB apart, each its own range
            index = np.s_[::256, :16]
            plan = slicing.plan_slice(ar.layout("emb"), index)
            assert len(plan.runs) == ROWS // 256
            _same(await ar.read_numpy("emb", index=index), full[index])
            data = ar.stats["data"]
            assert data["bytes"] <= plan.read_bytes + _header_guess(ar, "emb")
            assert data["requests"] == len(plan.runs) + 1  # the local header first
        assert not server.errors


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
        _same(await ar.read_numpy("w", index=np.s_[:2]), values.reshape(8, 8)[:2])


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
        _same(await ar.read_numpy("w", index=np.s_[::9, 3::-1]), values[::9, 3::-1])
        _same(await ar.read_numpy("w", index=np.s_[-1]), values[-1])  # reaches the end: CRC-checked


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
