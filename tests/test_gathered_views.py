"""Views read a chunk at a time: a Range, a slice or a stream of a non-dense view builds only the bytes
it sends (reader.pt2.gather, reader.bodies.gathered), equal to NumPy's gathered view, in bounded memory
whatever size the view declares."""

from __future__ import annotations

import asyncio
import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reader
from reader.bodies import SliceBytes, gathered
from reader.pt2 import gather, slicing, strided
from testing.strided_views import numpy_view, tensor_info, views_and_indices, write_views_pt2

pytestmark = pytest.mark.unit

GIB_ELEMENTS = 1 << 28  # float32 elements in a gibibyte


def _flat_bytes(expected: np.ndarray, start: int, end: int) -> bytes:
    """Bytes [start, end) of `expected`'s row-major output, without building the whole of it."""
    itemsize = expected.itemsize
    first, last = start // itemsize, -(-end // itemsize)
    picked = expected[np.unravel_index(np.arange(first, last), expected.shape)] if expected.ndim else expected
    raw = np.ascontiguousarray(picked).tobytes()
    return raw[start - first * itemsize : end - first * itemsize]


# ---- sans-IO: boxes, gathering and the index of a box ------------------------------------------


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=4), st.integers(0, 400), st.integers(0, 400), st.integers(1, 40))
def test_boxes_are_the_range_in_order(shape: list[int], a: int, b: int, limit: int) -> None:
    total = math.prod(shape)
    start, end = sorted((min(a, total), min(b, total)))
    order = np.arange(total).reshape(shape) if shape else np.arange(1).reshape(())
    seen: list[int] = []
    for box in gather.element_boxes(shape, start, end, limit):
        assert len(box) == len(shape)
        assert 1 <= gather.box_elements(box) <= limit
        seen += order[tuple(slice(r.start, r.stop) for r in box)].reshape(-1).tolist()
    assert seen == list(range(start, end))


@settings(max_examples=600, deadline=None)
@given(views_and_indices(), st.integers(0, 1 << 12), st.integers(0, 1 << 12), st.integers(1, 64))
def test_boxes_of_a_slice_gather_to_numpy(case, a: int, b: int, chunk: int) -> None:
    """Any byte range of `full[index]` of any view, built box by box (each box planned as a slice of its
    own, as a view too large to hold is read, or copied out of the whole slice's runs) equals NumPy's."""
    sizes, strides, offset, index = case
    end = strided.element_extent(sizes, strides, offset)[1]
    storage = np.arange(max(end, offset + 1) + 3, dtype=np.float32)
    info = tensor_info(sizes, strides, offset, len(storage))
    try:
        want = numpy_view(storage, info)[index]
        normalized = slicing.normalize_index(index, sizes)
    except (IndexError, TypeError, ValueError):
        return
    raw = storage.tobytes()
    whole = slicing.plan_slice(info, index)
    if not whole.runs:
        return
    laid = b"".join(raw[s:e] for s, e in whole.runs)
    start, stop = sorted((min(a, want.nbytes), min(b, want.nbytes)))
    first, last = start // 4, -(-stop // 4)
    planned, copied = b"", b""
    for box in gather.element_boxes(want.shape, first, last, chunk):
        plan = slicing.plan_slice(info, gather.box_index(normalized, box))
        planned += slicing.assemble(plan, info, [raw[s:e] for s, e in plan.runs])
        copied += gather.gather_box(laid, whole, box).tobytes()
    expected = np.ascontiguousarray(want).tobytes()[first * 4 : last * 4]
    assert planned == expected
    assert copied == expected


def test_amplified_is_declared_size_against_the_bytes_behind() -> None:
    assert gather.amplified(tensor_info([GIB_ELEMENTS], [0], 0, 16))  # a GiB from 4 bytes
    assert not gather.amplified(tensor_info([4096], [0], 0, 16))  # a broadcast bias: small
    assert not gather.amplified(tensor_info([1 << 14, 1 << 14], [1 << 14, 1], 0, 1 << 28))  # dense
    assert gather.amplified(tensor_info([1 << 14, 1 << 14], [1, 1], 0, 1 << 15))  # sliding windows


# ---- through an archive: TensorBytes and SliceBytes ---------------------------------------------

HOSTILE = {
    "broadcast": ("weight_0", [GIB_ELEMENTS], [0], 3),
    "rows": ("weight_0", [1 << 14, 1 << 14, 1], [0, 1, 0], 1),  # a GiB: one row, repeated
    "windows": ("weight_0", [1 << 14, 1 << 14], [1, 1], 0),  # a GiB of overlapping rows
    "transposed": ("weight_0", [4, 4], [1, 4], 0),
    "gaps": ("weight_0", [3, 2], [5, 2], 1),
}


@pytest.fixture
def hostile(tmp_path):
    path = tmp_path / "views.pt2"
    payload = np.arange(1 << 15, dtype=np.float32)
    write_views_pt2(path, {"weight_0": payload.tobytes()}, HOSTILE)
    return path, payload


def _expected(payload: np.ndarray, name: str) -> np.ndarray:
    _, sizes, strides, offset = HOSTILE[name]
    return np.lib.stride_tricks.as_strided(payload[offset:], sizes, [s * 4 for s in strides])


@pytest.mark.parametrize("in_memory", [True, False])
def test_ranges_of_views_equal_numpy(hostile, monkeypatch, in_memory: bool) -> None:
    path, payload = hostile
    if not in_memory:  # every view planned box by box, reading only each box's runs
        monkeypatch.setattr(gathered, "SPAN_IN_MEMORY", 0)

    async def check() -> None:
        async with reader.open_archive(path) as ar:
            for name in HOSTILE:
                expected = _expected(payload, name)
                tensor = ar.tensor(name, order="contiguous")
                length = tensor.length
                for start, end in [(0, 1), (1, 7), (length - 5, length), (length // 2 - 3, length // 2 + 9)]:
                    start, end = max(0, start), min(length, end)
                    assert await tensor.read_range(start, end) == _flat_bytes(expected, start, end), name
                    chunks = [bytes(c) async for c in tensor.chunks(start, end, 4)]
                    assert b"".join(chunks) == _flat_bytes(expected, start, end), name
                    assert all(len(c) <= 4 for c in chunks)
                if length <= 1 << 12:
                    assert await ar.read(name, order="contiguous") == expected.tobytes()

    asyncio.run(check())


@pytest.mark.parametrize("in_memory", [True, False])
def test_slices_of_views_stream_equal_numpy(hostile, monkeypatch, in_memory: bool) -> None:
    path, payload = hostile
    if not in_memory:
        monkeypatch.setattr(gathered, "SPAN_IN_MEMORY", 0)
    indices = [np.s_[5:9], np.s_[-2:-20:-3], np.s_[..., 3:9], np.s_[None, 100:103], np.s_[7]]

    async def check() -> None:
        async with reader.open_archive(path) as ar:
            for name in ("broadcast", "rows", "windows"):
                expected = _expected(payload, name)
                for index in indices:
                    sliced = SliceBytes(ar.tensor(name, order="contiguous"), index)
                    want = np.ascontiguousarray(expected[index]).tobytes()
                    got = b"".join([bytes(c) async for c in sliced.chunks(0, None, 8)])
                    assert got == want, (name, index)

    asyncio.run(check())


def test_a_byte_of_a_gibibyte_view_builds_a_byte(hostile) -> None:
    """A Range, a slice and a stream's first chunk of a 1 GiB view of 64 bytes allocate a few KiB, not
    the view (on main each built the whole gibibyte first)."""
    path, _ = hostile

    async def reads() -> None:
        async with reader.open_archive(path) as ar:
            for name in ("broadcast", "rows", "windows"):
                tensor = ar.tensor(name, order="contiguous")
                assert tensor.length == 1 << 30
                assert tensor.amplified
                await tensor.read_range(tensor.length // 2, tensor.length // 2 + 1)
                sliced = SliceBytes(tensor, np.s_[1000:1002])
                assert len(b"".join([bytes(c) async for c in sliced.chunks()])) == sliced.length
                stream = tensor.chunks(0, None, 1 << 16)
                assert len(await anext(stream)) == 1 << 16
                await stream.aclose()

    tracemalloc.start()
    try:
        asyncio.run(reads())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak} bytes allocated at the peak"


@settings(max_examples=300, deadline=None)
@given(views_and_indices(), st.integers(0, 2**32 - 1))
def test_a_view_without_its_repeats_compares_as_the_whole(case, seed: int) -> None:
    """Two views of one layout over different storage: their elements differ exactly where those of
    the views without stride-0 dims do, and the figures of the whole are those of the reduced views
    with each pair counted `times` times."""
    from reader.compare.numerics import Figures, fold

    sizes, strides, offset, _ = case
    end = strided.element_extent(sizes, strides, offset)[1]
    rng = np.random.default_rng(seed)
    storages = [rng.integers(0, 3, max(end, offset + 1) + 3).astype(np.float32) for _ in range(2)]
    info = tensor_info(sizes, strides, offset, len(storages[0]))
    reduced, times = gather.without_repeats(info)
    assert (reduced.numel or 0) * times == info.numel
    full = [numpy_view(storage, info).reshape(-1) for storage in storages]
    parts = [numpy_view(storage, reduced).reshape(-1) for storage in storages]
    assert np.array_equal(*full) == np.array_equal(*parts)
    whole, repeated = fold(Figures(), *full), fold(Figures(), *parts).repeated(times)
    for key, value in whole.to_dict().items():
        assert repeated.to_dict()[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
