"""Slices of a tensor: NumPy basic indexing -> the byte runs of its storage to read -> the result.

Sans-IO: `plan_slice(info, index)` says which byte ranges of the tensor's storage payload a
slice needs (`SlicePlan.runs`), and `assemble(plan, info, runs_bytes)` builds the slice's
row-major bytes from exactly those ranges' bytes. The result equals NumPy's `full[index]`
for every dtype, any dim order, non-dense views (strides, storage offset) and tied names
(each name is a view of the shared payload with its own geometry).

How the runs are built (one rule, stated with its constants): the slice is itself a strided
view of the storage. Its dims are taken from the innermost in memory (smallest stride) out.
A block starts as one element; along each dim the block repeats every `stride` bytes, and
neighbouring blocks are read as one run when the gap between them is at most
`max(GAP_BYTES, MAX_OVER_READ_RATIO * useful bytes of one block)` (overlapping or touching
blocks always join), or when keeping them apart would make more than `MAX_RUNS` runs. The
first dim whose blocks stay apart ends the joining: each of its blocks, repeated over every
outer dim, is a run of its own. So a dim-0 block of a dense row-major tensor (`t[a:b]`) is
one run; a column block (`t[:, a:b]`) is one run per row unless the rows' gaps are small.
Runs are sorted and disjoint; runs that touch are reported as one.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from types import EllipsisType
from typing import SupportsIndex

import numpy as np

from .index_syntax import INDEX_SYNTAX, parse_index  # the text of a slice (re-exported)
from .tensorinfo import TensorInfo

# Two blocks closer than this are one run: reading up to a page more costs nothing locally
# and far less than a request remotely.
GAP_BYTES = 4096
# ... or closer than this fraction of one block's useful bytes (orbax's max_over_read_ratio).
MAX_OVER_READ_RATIO = 0.05
# A plan never holds more runs than this: past it the next dim's blocks are joined too.
MAX_RUNS = 1 << 16

# One normalized index entry per result dim or source dim: an int picks one position (the dim
# is dropped), a range selects positions (negative steps allowed), None inserts a new dim of 1.
NormalizedEntry = int | range | None
# What `full[index]` accepts (NumPy basic indexing): an int (or anything with __index__, as
# np.int64), a slice with any step, `...`, or a tuple of those and None (np.newaxis). Arrays,
# lists and bools (advanced indexing) are refused when the index is read.
IndexEntry = SupportsIndex | slice | EllipsisType | None
Index = SupportsIndex | slice | EllipsisType | tuple[IndexEntry, ...]


def normalize_index(index: Index, sizes: Sequence[int]) -> tuple[NormalizedEntry, ...]:
    """NumPy basic indexing over `sizes`: ints (negative from the end), slices with any step,
    one `...`, and None (np.newaxis). Every source dim gets an entry (missing trailing ones are
    whole), so the result has exactly len(sizes) non-None entries; ranges are canonical (an
    empty one is range(0, 0), a one-element one has step 1), so equal selections compare equal.

    IndexError: an int out of range, too many indices, two Ellipses (as NumPy). TypeError: an
    array, list, bool or other advanced index (not supported). ValueError: a zero step.
    """
    entries = index if isinstance(index, tuple) else (index,)
    used = sum(1 for entry in entries if entry is not None and entry is not Ellipsis)
    ellipses = sum(1 for entry in entries if entry is Ellipsis)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > len(sizes):
        raise IndexError(f"too many indices: {used} for a tensor of {len(sizes)} dimensions")
    normalized: list[NormalizedEntry] = []
    dim = 0
    for entry in entries:
        if entry is None:
            normalized.append(None)
        elif isinstance(entry, EllipsisType):
            for _ in range(len(sizes) - used):
                normalized.append(_canonical(range(sizes[dim])))
                dim += 1
        elif isinstance(entry, slice):
            normalized.append(_slice_range(entry, sizes[dim], dim))
            dim += 1
        else:
            normalized.append(_position(entry, sizes[dim], dim))
            dim += 1
    while dim < len(sizes):
        normalized.append(_canonical(range(sizes[dim])))
        dim += 1
    return tuple(normalized)


def _position(entry: object, size: int, dim: int) -> int:
    if isinstance(entry, (bool, np.bool_)) or (isinstance(entry, np.ndarray) and entry.ndim):
        raise TypeError(f"index {entry!r} on dim {dim}: only basic indexing (ints, slices, ..., None)")
    try:
        position = operator.index(entry)
    except TypeError:
        raise TypeError(
            f"index {entry!r} on dim {dim}: only basic indexing (ints, slices, ..., None) is supported"
        ) from None
    if not -size <= position < size:
        raise IndexError(f"index {position} is out of bounds for axis {dim} with size {size}")
    return position + size if position < 0 else position


def _slice_range(entry: slice, size: int, dim: int) -> range:
    for part in (entry.start, entry.stop, entry.step):
        if part is not None and (isinstance(part, (bool, np.bool_)) or not hasattr(part, "__index__")):
            raise TypeError(f"slice {entry!r} on dim {dim}: bounds and step must be integers or None")
    if entry.step is not None and operator.index(entry.step) == 0:
        raise ValueError(f"slice {entry!r} on dim {dim}: slice step cannot be zero")
    bounds = slice(_opt_index(entry.start), _opt_index(entry.stop), _opt_index(entry.step))
    return _canonical(range(*bounds.indices(size)))


def _opt_index(part: object) -> int | None:
    return None if part is None else operator.index(part)


def _canonical(selected: range) -> range:
    if not selected:
        return range(0)
    if len(selected) == 1:
        return range(selected[0], selected[0] + 1)
    return range(selected.start, selected[-1] + (1 if selected.step > 0 else -1), selected.step)


def index_key(normalized: Sequence[NormalizedEntry]) -> str:
    """A canonical text of a normalized index (for cache keys and ETags): entries joined by ",",
    an int as itself, a range as start:stop:step, None as "new"."""
    parts = []
    for entry in normalized:
        if entry is None:
            parts.append("new")
        elif isinstance(entry, range):
            parts.append(f"{entry.start}:{entry.stop}:{entry.step}")
        else:
            parts.append(str(entry))
    return ",".join(parts)


@dataclass(frozen=True, slots=True)
class SlicePlan:
    """What a slice reads and how its bytes are built.

    `runs` are [start, end) byte ranges of the tensor's storage payload (the whole entry, not
    from the tensor's first element), sorted and disjoint; `nbytes` is prod(shape) * itemsize.
    The result is the strided view (`shape`, byte `strides`, byte `offset`) over the runs'
    bytes laid end to end; `zeros` is True for a zero-byte payload (all zeros, nothing read).
    """

    shape: tuple[int, ...]
    runs: tuple[tuple[int, int], ...]
    nbytes: int
    itemsize: int
    strides: tuple[int, ...]
    offset: int
    zeros: bool = False
    key: str = ""  # index_key of the normalized index

    @property
    def read_bytes(self) -> int:
        """Bytes the runs cover (what a read of this slice costs, local headers aside)."""
        return sum(end - start for start, end in self.runs)


def plan_slice(info: TensorInfo, index: Index, gap_bytes: int = GAP_BYTES) -> SlicePlan:
    """The runs of `info`'s storage that `full[index]` needs, and how to build it from them.
    `gap_bytes`: GAP_BYTES, or less where a gap costs more than another run (a multi-range request).

    UnsupportedPayload for a tensor whose bytes cannot be read (pickled, custom object,
    symbolic sizes); the index errors of `normalize_index`.
    """
    view = _view(info, index)
    if view.empty:
        zero_strides = tuple(0 for _ in view.shape)
        return SlicePlan(
            view.shape, (), view.nbytes, view.itemsize, zero_strides, 0, view.nbytes > 0, view.key
        )
    return _runs_plan(view, gap_bytes)


def count_runs(info: TensorInfo, index: Index, gap_bytes: int = GAP_BYTES) -> tuple[int, int]:
    """How many runs `plan_slice(info, index, gap_bytes)` has and the bytes they cover, without
    listing them: a planner pricing every column block of a model (tens of thousands of runs each)
    spent more time building the runs than reading them."""
    view = _view(info, index)
    if view.empty:
        return 0, 0
    runs = _run_starts(view, gap_bytes)
    if runs.interleaved:
        return 1, runs.end - runs.low * view.itemsize
    starts = runs.starts
    joined = 1 + int(np.count_nonzero(starts[1:] != starts[:-1] + runs.extent))
    return joined, len(starts) * runs.extent


@dataclass(frozen=True, slots=True)
class _View:
    """The strided view `full[index]` is: its shape, element strides (signed), the element its
    first item is at, and whether it reads nothing (no bytes, or a zero-byte payload)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    first: int
    itemsize: int
    nbytes: int
    key: str
    empty: bool


def _view(info: TensorInfo, index: Index) -> _View:
    geometry = info.geometry  # UnsupportedPayload unless readable
    itemsize = geometry.itemsize
    normalized = normalize_index(index, geometry.sizes)
    shape: list[int] = []
    strides: list[int] = []  # in elements, signed
    first = geometry.storage_offset  # element of result[0, ..., 0]
    source = iter(zip(geometry.sizes, geometry.strides))
    for entry in normalized:
        if entry is None:
            shape.append(1)
            strides.append(0)
            continue
        _, stride = next(source)
        if isinstance(entry, range):
            first += entry.start * stride if entry else 0
            shape.append(len(entry))
            strides.append(entry.step * stride)
        else:
            first += entry * stride
    nbytes = math.prod(shape) * itemsize
    empty = nbytes == 0 or info.storage.nbytes == 0
    return _View(tuple(shape), tuple(strides), first, itemsize, nbytes, index_key(normalized), empty)


@dataclass(frozen=True, slots=True)
class _Starts:
    """Where a view's runs start (bytes, in memory order) and how long each is (`extent`); `low`: its
    lowest element; `outer`: the dims left apart as runs;
    `interleaved`: outer blocks that interleave or overlap (odd as_strided views), read as one run
    [low * itemsize, end)."""

    starts: np.ndarray
    extent: int
    low: int
    outer: list[int]
    interleaved: bool
    end: int


def _run_starts(view: _View, gap_bytes: int) -> _Starts:
    """The runs of a non-empty strided view, as their starts: dims are joined into one run while
    the gap to the next step is small (gap_bytes, or a small share of what is read)."""
    shape, strides, first, itemsize = view.shape, view.strides, view.first, view.itemsize
    moving = [dim for dim, size in enumerate(shape) if size > 1 and strides[dim] != 0]
    # The lowest element touched: each dim walking backwards starts from its far end.
    low = first + sum((shape[dim] - 1) * strides[dim] for dim in moving if strides[dim] < 0)
    moving.sort(key=lambda dim: (abs(strides[dim]), shape[dim]))
    extent = useful = itemsize  # bytes from a block's first byte to its last + 1; bytes it needs
    joined = 0
    for position, dim in enumerate(moving):
        step = abs(strides[dim]) * itemsize
        gap = step - extent
        runs_if_apart = math.prod(shape[d] for d in moving[position:])
        if gap > max(gap_bytes, MAX_OVER_READ_RATIO * useful) and runs_if_apart <= MAX_RUNS:
            break
        extent += (shape[dim] - 1) * step
        useful *= shape[dim]
        joined += 1
    outer = moving[joined:]
    starts = np.zeros(1, dtype=np.int64)
    for dim in reversed(outer):  # outermost first, so the runs come out in memory order
        starts = (
            starts[:, None] + np.arange(shape[dim], dtype=np.int64) * abs(strides[dim]) * itemsize
        ).ravel()
    starts += low * itemsize
    interleaved = len(starts) > 1 and not bool(np.all(np.diff(starts) >= extent))
    end = low * itemsize + sum((shape[d] - 1) * abs(strides[d]) * itemsize for d in moving) + itemsize
    return _Starts(starts, extent, low, outer, interleaved, end)


def _runs_plan(view: _View, gap_bytes: int) -> SlicePlan:
    """The runs of a non-empty strided view, and the view over the runs laid end to end."""
    shape, strides, first, itemsize, key = view.shape, view.strides, view.first, view.itemsize, view.key
    nbytes = view.nbytes
    runs = _run_starts(view, gap_bytes)
    low, outer, extent = runs.low, runs.outer, runs.extent
    byte_strides = [stride * itemsize for stride in strides]
    if runs.interleaved:  # one run
        offset = (first - low) * itemsize
        return SlicePlan(
            shape, ((low * itemsize, runs.end),), nbytes, itemsize, tuple(byte_strides), offset, False, key
        )
    # Laid end to end, run r of the outer dims (row-major over `outer`, outermost first) begins at
    # r * extent; inside a run the inner dims keep their storage strides.
    run_stride = extent
    for dim in outer:
        byte_strides[dim] = run_stride if strides[dim] > 0 else -run_stride
        run_stride *= shape[dim]
    offset = (first - low) * itemsize
    for dim in outer:
        # A dim walking backwards starts at its last block: (first - low) counted that block's
        # distance in storage bytes; in laid bytes it is (size - 1) runs' worth.
        if strides[dim] < 0:
            offset -= (shape[dim] - 1) * abs(strides[dim]) * itemsize
            offset += (shape[dim] - 1) * abs(byte_strides[dim])
    for dim, size in enumerate(shape):
        if size <= 1:
            byte_strides[dim] = 0
    return SlicePlan(
        shape,
        _touching_joined(runs.starts, extent),
        nbytes,
        itemsize,
        tuple(byte_strides),
        offset,
        False,
        key,
    )


def _touching_joined(starts: np.ndarray, extent: int) -> tuple[tuple[int, int], ...]:
    """The sorted disjoint runs [start, start + extent), touching neighbours reported as one (their
    bytes laid end to end are the same either way); in NumPy: a column block of an embedding has
    tens of thousands."""
    ends = starts + extent
    apart = np.flatnonzero(starts[1:] != ends[:-1]) + 1
    firsts = starts[np.concatenate(([0], apart))].tolist()
    lasts = ends[np.concatenate((apart - 1, [len(starts) - 1]))].tolist()
    return tuple(zip(firsts, lasts, strict=True))


def assemble(plan: SlicePlan, info: TensorInfo, runs_bytes: Sequence[bytes | memoryview]) -> bytes:
    """The slice's row-major bytes from the bytes of `plan.runs`, in order (each exactly its
    run's length; ValueError otherwise). `info` is the tensor the plan was made for."""
    if len(runs_bytes) != len(plan.runs):
        raise ValueError(f"{len(runs_bytes)} buffers for {len(plan.runs)} runs")
    for (start, end), data in zip(plan.runs, runs_bytes):
        if memoryview(data).nbytes != end - start:
            raise ValueError(f"run [{start}, {end}) got {memoryview(data).nbytes} bytes")
    if plan.nbytes == 0 or plan.zeros:
        return bytes(plan.nbytes)
    laid = runs_bytes[0] if len(runs_bytes) == 1 else b"".join(runs_bytes)
    return gather(laid, plan)


def gather(laid: bytes | memoryview, plan: SlicePlan) -> bytes:
    """The slice's row-major bytes from its runs' bytes laid end to end in one buffer."""
    if plan.nbytes == 0 or plan.zeros:
        return bytes(plan.nbytes)
    out = np.empty(plan.nbytes, np.uint8)
    gather_into(laid, plan, out)
    return out.tobytes()


def gather_into(
    laid: bytes | memoryview | np.ndarray,
    plan: SlicePlan,
    into: np.ndarray,
    rows: int | None = None,
    offset: int | None = None,
) -> None:
    """The slice row-major into `into` (uint8, as long as what goes in) from its runs' bytes laid end to
    end in `laid`; or only `rows` rows of its first dim, the first of them at byte `offset` of `laid`
    (a chunk of rows received apart)."""
    shape = plan.shape if rows is None else (rows, *plan.shape[1:])
    start = plan.offset if offset is None else offset
    view = np.ndarray(shape, _element_dtype(plan.itemsize), laid, start, plan.strides)
    into.view(view.dtype).reshape(shape)[...] = view


def _element_dtype(itemsize: int) -> np.dtype:
    """An element of `itemsize` bytes as NumPy copies it fastest (the bytes are only moved)."""
    return np.dtype(f"u{itemsize}") if itemsize in (1, 2, 4, 8) else np.dtype(f"V{itemsize}")


__all__ = [
    "GAP_BYTES",
    "INDEX_SYNTAX",
    "MAX_OVER_READ_RATIO",
    "MAX_RUNS",
    "Index",
    "IndexEntry",
    "SlicePlan",
    "assemble",
    "gather",
    "gather_into",
    "index_key",
    "normalize_index",
    "parse_index",
    "plan_slice",
]
