"""Strided-view arithmetic: density, dim order, storage spans and gathering.

The rules mirror torch (torch._prims_common) for concrete integer sizes, so
`dim_order` here equals `Tensor.dim_order()` and `dense` equals
`is_non_overlapping_and_dense`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


def numel(sizes: Sequence[int]) -> int:
    return math.prod(sizes)


def is_row_major(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """torch's is_contiguous: strides are the row-major ones (size-1 dims ignored)."""
    if numel(sizes) < 2:
        return True
    expected = expected_max = 1
    for size, stride in reversed(tuple(zip(sizes, strides))):
        if size == 1:
            continue
        if stride != expected and stride != expected_max:
            return False
        expected_max *= max(size, 1)
        expected *= size
    return True


def is_channels_last_2d(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """torch's NHWC contiguity check (dim_order's fast path only tries the 2d form)."""
    if len(sizes) != 4:
        return False
    expected = 1
    for dim in (1, 3, 2, 0):
        if sizes[dim] == 1:
            continue
        if strides[dim] != expected:
            return False
        expected *= sizes[dim]
    return True


class _SizeStride(NamedTuple):
    """torch's sort key for density checks, with its (not strictly weak) ordering.

    Kept verbatim for integers so that Python's sort gives torch's answer even
    for degenerate strides (zeros, non-multiples).
    """

    size: int
    stride: int

    def __lt__(self, other: tuple) -> bool:  # type: ignore[override]
        return self.stride < other[1] or (
            (self.stride == 0 or other[1] % self.stride == 0) and self.stride != other[1]
        )


def is_dense(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """Non-overlapping and dense: some permutation of the dims is row-major."""
    if numel(sizes) < 2:
        return True
    if len(sizes) == 1:
        return strides[0] == 1
    by_stride = sorted(map(_SizeStride, sizes, strides))[::-1]
    return is_row_major([pair.size for pair in by_stride], [pair.stride for pair in by_stride])


def dim_order(sizes: Sequence[int], strides: Sequence[int]) -> tuple[int, ...]:
    """Dims from outermost to innermost in memory, as torch's Tensor.dim_order()."""
    ndim = len(sizes)
    if ndim < 2:
        return tuple(range(ndim))
    contiguous = is_row_major(sizes, strides)
    channels_last = is_channels_last_2d(sizes, strides)
    if contiguous and not channels_last:
        return tuple(range(ndim))
    if channels_last and not contiguous:
        return (0, *range(2, ndim), 1)

    def ge(a: int, b: int) -> bool:
        if b == 0:
            return True
        if a == 0:
            return False
        return a >= b or a % b == 0

    def should_swap(a: int, b: int) -> int:
        stride_a, stride_b = strides[a], strides[b]
        if stride_a == 0 or stride_b == 0:
            return 0
        if stride_a == stride_b:
            return 0 if ge(sizes[b], sizes[a]) else 1
        if ge(stride_b, stride_a):
            return -1
        if ge(stride_a, stride_b):
            return 1
        return 0

    perm = list(reversed(range(ndim)))
    for i in range(1, ndim):
        dim1 = i
        for dim0 in reversed(range(i)):
            comparison = should_swap(perm[dim0], perm[dim1])
            if comparison > 0:
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif comparison < 0:
                break
    return tuple(reversed(perm))


def element_extent(sizes: Sequence[int], strides: Sequence[int], storage_offset: int) -> tuple[int, int]:
    """[first, last + 1) storage elements the view touches; empty views touch none."""
    if numel(sizes) == 0:
        return storage_offset, storage_offset
    reach = sum((size - 1) * stride for size, stride in zip(sizes, strides))
    return storage_offset, storage_offset + reach + 1


def gather_row_major(
    span: bytes | memoryview, itemsize: int, sizes: Sequence[int], strides: Sequence[int]
) -> bytes:
    """Row-major bytes of a strided view whose first element is at the start of `span`."""
    if numel(sizes) == 0:
        return b""
    elements = np.frombuffer(span, dtype=np.dtype(f"V{itemsize}"))
    view = np.lib.stride_tricks.as_strided(
        elements,
        shape=tuple(sizes),
        strides=tuple(stride * itemsize for stride in strides),
        writeable=False,
    )
    return np.ascontiguousarray(view).tobytes()
