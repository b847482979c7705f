"""Value statistics of one tensor for the viewer: exact when small, from a bounded sample when large.

Small tensors (at most SMALL_BYTES of data and SMALL_ELEMENTS elements) are read whole with
`Archive.read_numpy` and every statistic is exact.

Larger tensors are SAMPLED; at most about SAMPLE_BYTES are read, never the whole tensor:

- rows: when the tensor is stored row-major and SAMPLE_ROWS evenly spaced rows of its 2-D view
  (first dim x product of the rest) fit in SAMPLE_BYTES, those whole rows are read; the heat map is
  then drawn from them (each a row of the map);
- blocks: otherwise SAMPLE_BLOCKS evenly spaced contiguous blocks of SAMPLE_BLOCK_BYTES each
  (the first starts at byte 0, the last ends at the tensor's end), and no heat map.

Dense tensors that are not row-major (transposed, channels-last) are sampled in memory order
(`order="default"`), which streams without gathering; statistics do not depend on element order,
and their `first` values are fetched element by element. Large non-dense views cannot be read in
ranges, so they are refused (422).

Statistics are over the values as float64 (bool as 0/1; complex numbers by magnitude, see `of`).
min, max, mean, std (population, ddof=0) and the histogram are over the FINITE values only;
they are null when there are none. nan_count and inf_count say how many were left out.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import numpy as np

import reader
from reader.formats.body import read_body
from reader.pt2.dtypes import dtype_of, to_numpy

SMALL_BYTES = 16 << 20
SMALL_ELEMENTS = 4 << 20
SAMPLE_BYTES = 4 << 20
SAMPLE_ROWS = 64
SAMPLE_BLOCKS = 64
SAMPLE_BLOCK_BYTES = SAMPLE_BYTES // SAMPLE_BLOCKS
FIRST = 16
HISTOGRAM_BINS = 32
HEATMAP_SIZE = 64
CONCURRENT_READS = 8


def decode(raw: bytes, dtype: str) -> np.ndarray:
    """Row-major bytes of `dtype` -> a flat ndarray (complex32 widened to complex64)."""
    return to_numpy(raw, dtype_of(dtype), (-1,))


async def tensor_stats(archive: reader.Archive, name: str, model: str | None) -> dict[str, Any]:
    tensor = archive.tensor(name, model=model, order="contiguous")  # checks it is readable
    info = tensor.info
    geometry = tensor.geometry
    numel, nbytes = geometry.numel, geometry.nbytes
    shape2d = shape2d_of(geometry.sizes)
    if nbytes <= SMALL_BYTES and numel <= SMALL_ELEMENTS:
        values = decode(await tensor.read(), geometry.dtype)
        result = summarize(values, geometry.dtype, shape2d)
        sampled, sample_elements = False, int(values.size)
    else:
        if not info.dense:
            raise reader.UnsupportedPayload(
                f"{info.model}/{info.name}: a non-dense view of {nbytes} bytes is too large to sample"
            )
        values, rows, first = await sample(archive, info)
        result = summarize(values, geometry.dtype, None)
        result["first"] = _json_values(first, geometry.dtype)
        if rows is not None and shape2d is not None:
            # rows/cols describe the tensor's 2-D view; the map's rows are the sampled rows
            result["heatmap"] = {**heatmap(rows, geometry.dtype), "rows": shape2d[0], "cols": shape2d[1]}
            result["heatmap"]["sampled_rows"] = int(rows.shape[0])
        sampled, sample_elements = True, int(values.size)
    return {
        "name": info.name,
        "model": info.model,
        "dtype": geometry.dtype,
        "sizes": list(geometry.sizes),
        "numel": numel,
        "sampled": sampled,
        "sample_elements": sample_elements,
        **result,
    }


def summarize(values: np.ndarray, dtype: str, shape2d: tuple[int, int] | None) -> dict[str, Any]:
    """Statistics of a flat array of one tensor's values (`shape2d` given: also a heat map)."""
    real = _real(values)
    finite_mask = np.isfinite(real)
    finite = real[finite_mask]
    nan_count = int(np.count_nonzero(np.isnan(real)))
    inf_count = int(real.size - finite.size - nan_count)
    stats: dict[str, Any] = {
        "of": "magnitude" if values.dtype.kind == "c" else "value",
        "first": _json_values(values[:FIRST], dtype),
        "min": None,
        "max": None,
        "mean": None,
        "std": None,
        "nan_count": nan_count,
        "inf_count": inf_count,
        "zero_count": int(np.count_nonzero(values == 0)),
        "histogram": {"edges": [], "counts": []},
        "heatmap": None,
    }
    if finite.size:
        with np.errstate(over="ignore", invalid="ignore"):  # std of values near 1e308 overflows: null
            mean, std = _number(finite.mean()), _number(finite.std())
        low, high = _exact(values, finite_mask, np.min), _exact(values, finite_mask, np.max)
        stats.update(min=low, max=high, mean=mean, std=std)
        lo, hi = float(finite.min()), float(finite.max())
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        counts, edges = np.histogram(finite, bins=HISTOGRAM_BINS, range=(lo, hi))
        stats["histogram"] = {"edges": [_number(e) for e in edges], "counts": [int(c) for c in counts]}
    if shape2d is not None and values.size:
        stats["heatmap"] = heatmap(values.reshape(shape2d), dtype)
    return stats


def heatmap(matrix: np.ndarray, dtype: str) -> dict[str, Any]:
    """A 2-D array block-averaged down to at most HEATMAP_SIZE x HEATMAP_SIZE (null: no finite value)."""
    real = _real(matrix)
    finite = np.isfinite(real)
    clean = np.where(finite, real, 0.0)
    rows, cols = real.shape
    row_starts = _block_starts(rows)
    col_starts = _block_starts(cols)
    sums = np.add.reduceat(np.add.reduceat(clean, row_starts, axis=0), col_starts, axis=1)
    counts = np.add.reduceat(np.add.reduceat(finite.astype(np.int64), row_starts, axis=0), col_starts, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts
    grid = [[_number(v) if c else None for v, c in zip(r, cr)] for r, cr in zip(means, counts)]
    good = means[counts > 0]
    return {
        "rows": int(rows),
        "cols": int(cols),
        "values": grid,
        "min": _number(good.min()) if good.size else None,
        "max": _number(good.max()) if good.size else None,
    }


async def sample(
    archive: reader.Archive, info: reader.TensorInfo
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(sampled values, sampled rows as a 2-D array or None, the first values in logical order)."""
    geometry = info.geometry
    itemsize, nbytes = geometry.itemsize, geometry.nbytes
    row_major = geometry.dim_order == tuple(range(len(geometry.sizes)))
    order = "contiguous" if row_major else "default"
    shape2d = shape2d_of(geometry.sizes)
    limit = asyncio.Semaphore(CONCURRENT_READS)

    tensors = {o: archive.tensor(info.name, model=info.model, order=o) for o in {order, "default"}}

    async def read(start: int, end: int, read_order: str = order) -> bytes:
        async with limit:
            return await read_body(tensors[read_order], start, end, max(1, end - start))

    rows = None
    if row_major and shape2d is not None and shape2d[0] > 1:
        count = min(shape2d[0], SAMPLE_ROWS)
        row_bytes = shape2d[1] * itemsize
        if count * row_bytes <= SAMPLE_BYTES:
            picked = np.unique(np.linspace(0, shape2d[0] - 1, count).round().astype(np.int64))
            pieces = await asyncio.gather(
                *(read(int(r) * row_bytes, (int(r) + 1) * row_bytes) for r in picked)
            )
            values = decode(b"".join(pieces), geometry.dtype)
            rows = values.reshape(len(picked), -1)
    if rows is None:
        block = max(itemsize, SAMPLE_BLOCK_BYTES // itemsize * itemsize)
        last = (nbytes - block) // itemsize
        starts = sorted({round(i * last / (SAMPLE_BLOCKS - 1)) * itemsize for i in range(SAMPLE_BLOCKS)})
        pieces = await asyncio.gather(*(read(s, s + block) for s in starts))
        values = decode(b"".join(pieces), geometry.dtype)
    first_count = min(FIRST, geometry.numel)
    if row_major:
        first = decode(await read(0, first_count * itemsize), geometry.dtype)
    else:
        # element i of the logical order sits at sum(index * stride) elements into the memory span
        # (strides are never negative: the index refuses them)
        strides, offsets = geometry.strides, []
        for flat in range(first_count):
            index = np.unravel_index(flat, geometry.sizes)
            offsets.append(sum(int(i) * s for i, s in zip(index, strides)))
        pieces = await asyncio.gather(*(read(o * itemsize, (o + 1) * itemsize, "default") for o in offsets))
        first = decode(b"".join(pieces), geometry.dtype)
    return values, rows, first


def shape2d_of(sizes: tuple[int, ...]) -> tuple[int, int] | None:
    if len(sizes) < 2 or math.prod(sizes) == 0:
        return None
    return sizes[0], math.prod(sizes[1:])


def _block_starts(n: int) -> np.ndarray:
    return np.unique(np.linspace(0, n, min(n, HEATMAP_SIZE) + 1).astype(np.int64)[:-1])


def _real(values: np.ndarray) -> np.ndarray:
    """float64 values the statistics are over: magnitudes for complex, 0/1 for bool."""
    if values.dtype.kind == "c":
        return np.abs(values).astype(np.float64)
    return values.astype(np.float64)


def _exact(values: np.ndarray, finite_mask: np.ndarray, reduce: Any) -> Any:
    """min/max in the tensor's own type where that is exact (integers beyond 2**53)."""
    if values.dtype.kind in "iu":
        return int(reduce(values))
    if values.dtype.kind == "b":
        return int(reduce(values.astype(np.uint8)))
    return _number(reduce(_real(values)[finite_mask]))


def _number(value: Any) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _json_values(values: np.ndarray, dtype: str) -> list[Any]:
    """Values as JSON: bools, ints, floats (null for NaN/Inf), [re, im] pairs for complex."""
    if values.dtype.kind == "b":
        return [bool(v) for v in values]
    if values.dtype.kind in "iu":
        return [int(v) for v in values]
    if values.dtype.kind == "c":
        return [[_number(v.real), _number(v.imag)] for v in values]
    return [_number(v) for v in values.astype(np.float64)]
