"""The slice plan (sans-IO): runs of the storage and the bytes built from them, against NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reader.errors import UnsupportedPayload
from reader.pt2 import slicing, strided
from reader.pt2.tensorinfo import TensorInfo
from testing.strided_views import numpy_view as _full
from testing.strided_views import tensor_info as _info
from testing.strided_views import views_and_indices

pytestmark = pytest.mark.unit


def _sliced(storage: np.ndarray, info: TensorInfo, index) -> tuple[slicing.SlicePlan, bytes]:
    raw = storage.tobytes()
    plan = slicing.plan_slice(info, index)
    return plan, slicing.assemble(plan, info, [raw[start:end] for start, end in plan.runs])


@settings(max_examples=800, deadline=None)
@given(views_and_indices())
def test_equals_numpy(case) -> None:
    sizes, strides, offset, index = case
    end = strided.element_extent(sizes, strides, offset)[1]
    storage = np.arange(max(end, offset + 1) + 3, dtype=np.float32)
    info = _info(sizes, strides, offset, len(storage))
    full = _full(storage, info)
    try:
        want = full[index]
    except (IndexError, TypeError, ValueError) as error:
        with pytest.raises(type(error)):
            slicing.plan_slice(info, index)
        return
    plan, got = _sliced(storage, info, index)
    assert plan.shape == want.shape
    assert plan.nbytes == want.nbytes
    assert got == np.ascontiguousarray(want).tobytes()
    assert list(plan.runs) == sorted(plan.runs)
    assert all(end < start for (_, end), (start, _) in zip(plan.runs, plan.runs[1:]))
    assert all(0 <= start < end <= storage.nbytes for start, end in plan.runs)


@settings(max_examples=600, deadline=None)
@given(views_and_indices(), st.sampled_from([0, 110, slicing.GAP_BYTES]))
def test_counting_the_runs_agrees_with_listing_them(case, gap: int) -> None:
    """count_runs (what a planner prices blocks by) is the number of runs plan_slice lists and the
    bytes they cover, for any view, index and gap."""
    sizes, strides, offset, index = case
    end = strided.element_extent(sizes, strides, offset)[1]
    info = _info(sizes, strides, offset, max(end, offset + 1) + 3)
    try:
        plan = slicing.plan_slice(info, index, gap)
    except (IndexError, TypeError, ValueError) as error:
        with pytest.raises(type(error)):
            slicing.count_runs(info, index, gap)
        return
    assert slicing.count_runs(info, index, gap) == (len(plan.runs), plan.read_bytes)


EMBEDDING = (50257, 768)


def test_a_dim0_block_of_a_dense_tensor_is_one_run() -> None:
    info = _info(EMBEDDING, (768, 1), 0, math.prod(EMBEDDING))
    row = 768 * 4
    assert slicing.plan_slice(info, 7).runs == ((7 * row, 8 * row),)
    assert slicing.plan_slice(info, np.s_[100:228]).runs == ((100 * row, 228 * row),)
    assert slicing.plan_slice(info, np.s_[-1]).runs == ((50256 * row, 50257 * row),)


def test_column_blocks_are_runs_per_row_unless_the_gaps_are_small() -> None:
    info = _info((64, 4096), (4096, 1), 0, 64 * 4096)
    plan = slicing.plan_slice(info, np.s_[:, 1024:2048])  # gap 12 KiB > GAP_BYTES: a run per row
    assert len(plan.runs) == 64
    assert plan.read_bytes == plan.nbytes
    assert plan.runs[0] == (1024 * 4, 2048 * 4)
    small = _info((64, 768), (768, 1), 0, 64 * 768)
    assert slicing.plan_slice(small, np.s_[:, 0:384]).runs == ((0, (63 * 768 + 384) * 4),)  # gap 1.5 KiB


def test_the_over_read_ratio_joins_gaps_small_against_the_blocks() -> None:
    # blocks of 1 MiB with 32 KiB between them: 32 KiB > GAP_BYTES but <= 5% of a block
    info = _info((4, 270336), (270336, 1), 0, 4 * 270336)
    plan = slicing.plan_slice(info, np.s_[:, :262144])
    assert len(plan.runs) == 1


def test_channels_last_and_offsets() -> None:
    sizes, strides = (2, 3, 4, 5), (60, 1, 15, 3)  # NHWC
    storage = np.arange(10 + 120, dtype=np.float32)
    info = _info(sizes, strides, 10, len(storage))
    plan, got = _sliced(storage, info, np.s_[1, :, 1:3, ::-2])
    assert got == np.ascontiguousarray(_full(storage, info)[1, :, 1:3, ::-2]).tobytes()
    assert plan.runs[0][0] >= 10 * 4


def test_zero_size_zero_d_and_zero_payload() -> None:
    storage = np.arange(6, dtype=np.float32)
    empty = _info((0, 3), (3, 1), 0, 6)
    plan, got = _sliced(storage, empty, np.s_[:, 1])
    assert (plan.shape, plan.runs, got) == ((0,), (), b"")
    scalar = _info((), (), 4, 6)
    plan, got = _sliced(storage, scalar, ())
    assert (plan.shape, plan.runs, got) == ((), ((16, 20),), storage[4:5].tobytes())
    assert _sliced(storage, scalar, ...)[1] == storage[4:5].tobytes()
    with pytest.raises(IndexError):
        slicing.plan_slice(scalar, 0)
    zeros = _info((4, 3), (3, 1), 0, 0)  # a zero-byte payload means zeros
    plan = slicing.plan_slice(zeros, np.s_[1:3])
    assert plan.runs == () and plan.zeros
    assert slicing.assemble(plan, zeros, []) == bytes(2 * 3 * 4)


def test_index_errors_as_numpy() -> None:
    info = _info((4, 3), (3, 1), 0, 12)
    with pytest.raises(IndexError):
        slicing.plan_slice(info, 4)
    with pytest.raises(IndexError):
        slicing.plan_slice(info, (0, -4))
    with pytest.raises(IndexError):
        slicing.plan_slice(info, (0, 0, 0))
    with pytest.raises(IndexError):
        slicing.plan_slice(info, (..., 0, ...))
    with pytest.raises(ValueError):
        slicing.plan_slice(info, np.s_[::0])
    for advanced in ([0, 1], np.array([0, 1]), True, (0, "1"), np.s_[0.5:]):
        with pytest.raises(TypeError):
            slicing.plan_slice(info, advanced)


def test_equal_selections_have_one_key() -> None:
    sizes = (10, 4)
    key = slicing.index_key
    assert key(slicing.normalize_index(np.s_[0:10], sizes)) == key(slicing.normalize_index(..., sizes))
    assert key(slicing.normalize_index(np.s_[3:4], sizes)) == key(
        slicing.normalize_index(np.s_[3:4:9], sizes)
    )
    assert key(slicing.normalize_index(np.s_[5:2], sizes)) == key(
        slicing.normalize_index(np.s_[9:0:1], sizes)
    )
    assert key(slicing.normalize_index(np.s_[0:9:2], sizes)) == key(
        slicing.normalize_index(np.s_[::2], sizes)
    )
    assert key(slicing.normalize_index(3, sizes)) != key(slicing.normalize_index(np.s_[3:4], sizes))


def test_parse_index() -> None:
    assert slicing.parse_index("0:128, :, 4:8") == np.s_[0:128, :, 4:8]
    assert slicing.parse_index("-1") == (-1,)
    assert slicing.parse_index("::2,...,0") == np.s_[::2, ..., 0]
    assert slicing.parse_index("") == ()
    for bad in ("a", "1:2:3:4", "0,,1", "1.5", "0,", "[0]"):
        with pytest.raises(ValueError):
            slicing.parse_index(bad)


def test_unreadable_tensors_are_refused() -> None:
    info = _info((2,), (1,), 0, 2)
    pickled = TensorInfo(**{**{f: getattr(info, f) for f in info.__slots__}, "unsupported": "pickled"})
    with pytest.raises(UnsupportedPayload):
        slicing.plan_slice(pickled, 0)


def test_assemble_checks_the_runs_bytes() -> None:
    info = _info((4, 3), (3, 1), 0, 12)
    plan = slicing.plan_slice(info, 1)
    with pytest.raises(ValueError):
        slicing.assemble(plan, info, [b"\0" * 4])
    with pytest.raises(ValueError):
        slicing.assemble(plan, info, [])
