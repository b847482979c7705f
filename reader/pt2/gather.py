"""The row-major bytes of a strided view, a piece at a time, from the bytes behind it.

Sans-IO. A view's declared size is a claim of its archive: a stride-0 view of a 64-byte payload
can declare a gibibyte. So nothing here builds a whole view. The row-major output's elements
[start, end) are cut into boxes (`element_boxes`: a range per dim, each box at most a given
number of elements, in output order), and each box is copied out of the bytes behind the view
(`gather_box`), or planned as a slice of its own (`box_index`, for `plan_slice`) when those bytes
are too many to hold. Time and memory follow the bytes asked for, not the size declared.
`without_repeats` drops a view's stride-0 dims, which only repeat what the others select (what a
comparison of two such views needs to read).

`amplified(info)` is the one rule for a view whose declared size exceeds the bytes behind it by
a large factor: what costs time in proportion to its declared size (a digest computed ahead, a
comparison's full pass) is done for such a view only on demand.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import replace

import numpy as np

from . import strided
from .slicing import NormalizedEntry, SlicePlan
from .tensorinfo import Geometry, TensorInfo

Box = tuple[range, ...]  # one range of step 1 per dim of the output

# A view is amplified when its output is more than AMPLIFICATION times the bytes behind it
# (the storage span it touches; none for a zero-byte payload) and more than AMPLIFIED_MIN bytes:
# a broadcast bias of a few MiB costs nothing to digest, a gibibyte from 64 bytes does.
AMPLIFICATION = 16
AMPLIFIED_MIN = 64 << 20


def backing_bytes(info: TensorInfo) -> int:
    """The bytes of storage a view touches, first to last element (0 for a zero-byte payload)."""
    sizes, strides, offset, itemsize = info.sizes, info.strides, info.storage_offset, info.itemsize
    if not info.storage.nbytes or sizes is None or strides is None or offset is None or itemsize is None:
        return 0
    first, end = strided.element_extent(sizes, strides, offset)
    return (end - first) * itemsize


def amplified(info: TensorInfo) -> bool:
    """More output declared than AMPLIFICATION times the bytes behind it (and over AMPLIFIED_MIN)."""
    length = info.nbytes
    return length is not None and length > AMPLIFIED_MIN and length > AMPLIFICATION * backing_bytes(info)


def without_repeats(info: TensorInfo) -> tuple[TensorInfo, int]:
    """The view with its stride-0 dims (each only repeats what the others select) and dims of one
    dropped, and how many times each of its elements stands in the full view's output. Two views of
    the same sizes and strides compare element for element as these do, each pair `repeats` times."""
    geometry = info.geometry
    sizes, strides = geometry.sizes, geometry.strides
    kept = [(size, stride) for size, stride in zip(sizes, strides) if size != 1 and stride != 0]
    if any(size == 0 for size in sizes) or len(kept) == len(sizes):
        return info, 1
    new_sizes = tuple(size for size, _ in kept)
    new_strides = tuple(stride for _, stride in kept)
    numel = math.prod(new_sizes)
    dense = strided.is_dense(new_sizes, new_strides)
    order = strided.dim_order(new_sizes, new_strides) if dense else tuple(range(len(new_sizes)))
    reduced = replace(
        info,
        sizes=new_sizes,
        strides=new_strides,
        dim_order=order,
        dense=dense,
        numel=numel,
        nbytes=numel * geometry.itemsize,
    )
    return reduced, math.prod(sizes) // numel


def element_boxes(shape: Sequence[int], start: int, end: int, limit: int) -> Iterator[Box]:
    """Boxes that together are the elements [start, end) of `shape` in row-major order, in that
    order, each of at most `limit` elements (at least one): at most a few per dim at the edges of
    the range, and whole runs of rows between them."""
    limit = max(1, limit)
    if start >= end or math.prod(shape) == 0:
        return
    if not shape:
        yield ()
        return
    inner = math.prod(shape[1:])
    row = start // inner
    if start % inner:  # the first row, partly
        row_end = min(end, (row + 1) * inner)
        for sub in element_boxes(shape[1:], start - row * inner, row_end - row * inner, limit):
            yield (range(row, row + 1), *sub)
        start, row = row_end, row + 1
    whole_end = end // inner  # rows [row, whole_end) are whole
    if whole_end > row:
        if inner <= limit:
            step = limit // inner
            rest = tuple(range(size) for size in shape[1:])
            for first in range(row, whole_end, step):
                yield (range(first, min(whole_end, first + step)), *rest)
        else:
            for one in range(row, whole_end):
                for sub in element_boxes(shape[1:], 0, inner, limit):
                    yield (range(one, one + 1), *sub)
        start, row = whole_end * inner, whole_end
    if start < end:  # the last row, partly
        for sub in element_boxes(shape[1:], 0, end - start, limit):
            yield (range(row, row + 1), *sub)


def box_elements(box: Box) -> int:
    return math.prod(len(r) for r in box)


def split_box(box: Box) -> tuple[Box, Box]:
    """Two halves of a box of more than one element, cut along its outermost dim longer than 1."""
    dim = next(d for d, r in enumerate(box) if len(r) > 1)
    middle = box[dim].start + len(box[dim]) // 2
    first = range(box[dim].start, middle)
    second = range(middle, box[dim].stop)
    return (*box[:dim], first, *box[dim + 1 :]), (*box[:dim], second, *box[dim + 1 :])


def gather_box(laid: bytes | memoryview | np.ndarray, plan: SlicePlan, box: Box) -> np.ndarray:
    """The box's elements of `plan`'s view over `laid` (its bytes laid end to end), row-major, as
    a uint8 array of their bytes."""
    offset = plan.offset + sum(r.start * stride for r, stride in zip(box, plan.strides))
    shape = tuple(len(r) for r in box)
    dtype = np.dtype(f"u{plan.itemsize}") if plan.itemsize in (1, 2, 4, 8) else np.dtype(f"V{plan.itemsize}")
    view = np.ndarray(shape, dtype, laid, offset, plan.strides)
    return np.ascontiguousarray(view).reshape(-1).view(np.uint8)


def box_index(normalized: Sequence[NormalizedEntry], box: Box) -> tuple[int | slice | None, ...]:
    """The index of the tensor a box of `full[normalized]` is: an int stays, a new dim stays new,
    and a range is narrowed to the box's part of it (NumPy basic indexing, for `plan_slice`)."""
    index: list[int | slice | None] = []
    dims = iter(box)
    for entry in normalized:
        if entry is None:
            next(dims)
            index.append(None)
        elif isinstance(entry, range):
            part = next(dims)
            index.append(_as_slice(entry[part.start : part.stop]))
        else:
            index.append(entry)
    return tuple(index)


def _as_slice(selected: range) -> slice:
    stop = selected.stop if selected.stop >= 0 else None  # range(3, -1, -1) is slice(3, None, -1)
    return slice(selected.start, stop, selected.step)


def view_plan(geometry: Geometry, span_start: int) -> SlicePlan:
    """The whole view as a plan over its storage span's bytes (which begin at byte `span_start` of
    the payload: the view's first element, its strides being non-negative)."""
    sizes, strides, itemsize = geometry.sizes, geometry.strides, geometry.itemsize
    byte_strides = tuple(0 if size <= 1 else stride * itemsize for size, stride in zip(sizes, strides))
    return SlicePlan(
        sizes, (), geometry.nbytes, itemsize, byte_strides, geometry.storage_offset * itemsize - span_start
    )


__all__ = [
    "AMPLIFICATION",
    "AMPLIFIED_MIN",
    "Box",
    "amplified",
    "backing_bytes",
    "box_elements",
    "box_index",
    "element_boxes",
    "gather_box",
    "split_box",
    "view_plan",
    "without_repeats",
]
