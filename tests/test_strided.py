"""Strided-view rules against torch: density, contiguity and dim order for random views."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reader.pt2 import strided
from testing.torch_oracle import HAVE_TORCH, needs_torch

pytestmark = pytest.mark.unit


@st.composite
def views(draw) -> tuple[list[int], list[int]]:
    ndim = draw(st.integers(0, 6))
    sizes = draw(st.lists(st.sampled_from([0, 1, 1, 2, 3, 4, 5]), min_size=ndim, max_size=ndim))
    if draw(st.booleans()):
        order = draw(st.permutations(range(ndim)))
        strides, step = [0] * ndim, 1
        for dim in reversed(order):
            strides[dim] = step
            step *= max(sizes[dim], 1) + draw(st.sampled_from([0, 0, 0, 1]))
    else:
        strides = draw(st.lists(st.sampled_from([0, 1, 2, 3, 4, 6, 12, 20]), min_size=ndim, max_size=ndim))
    return sizes, strides


@needs_torch
@settings(max_examples=600, deadline=None)
@given(views())
def test_matches_torch(view: tuple[list[int], list[int]]) -> None:
    import torch
    from torch._prims_common import is_non_overlapping_and_dense_or_false

    sizes, strides = view
    tensor = torch.empty(1 << 16).as_strided(sizes, strides)
    assert strided.is_dense(sizes, strides) == is_non_overlapping_and_dense_or_false(tensor)
    assert strided.is_row_major(sizes, strides) == tensor.is_contiguous()
    assert strided.dim_order(sizes, strides) == tuple(tensor.dim_order())


@settings(max_examples=600, deadline=None)
@given(views(), st.integers(0, 7))
def test_a_dense_view_reaches_exactly_its_elements(view: tuple[list[int], list[int]], offset: int) -> None:
    """What a load's plan takes for granted of dense views (their extent, without the arithmetic)."""
    sizes, strides = view
    if strided.is_dense(sizes, strides) and strided.numel(sizes):
        assert strided.element_extent(sizes, strides, offset) == (offset, offset + strided.numel(sizes))


@pytest.mark.parametrize(
    ("sizes", "strides", "order", "dense"),
    [
        ([2, 3, 5, 7], [105, 35, 7, 1], (0, 1, 2, 3), True),
        ([2, 3, 5, 7], [105, 1, 21, 3], (0, 2, 3, 1), True),  # channels_last
        ([6, 4], [1, 6], (1, 0), True),  # transposed
        ([4, 3], [6, 2], None, False),  # every other column
        ([], [], (), True),
        ([0, 3], [3, 1], (0, 1), True),
        ([3], [2], None, False),
    ],
)
def test_known_layouts(sizes, strides, order, dense) -> None:
    assert strided.is_dense(sizes, strides) is dense
    if dense:
        assert strided.dim_order(sizes, strides) == order


def test_gather_and_extent() -> None:
    span = bytes(range(24))  # 12 two-byte elements
    assert strided.element_extent([2, 3], [6, 2], 1) == (1, 1 + 6 + 4 + 1)
    assert strided.element_extent([0, 3], [3, 1], 5) == (5, 5)
    gathered = strided.gather_row_major(span, 2, [2, 3], [6, 2])
    assert gathered == bytes([0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21])


def test_torch_is_available_in_ci() -> None:
    import os

    if os.environ.get("CI"):
        assert HAVE_TORCH, "CI must install torch so that nothing skips"
