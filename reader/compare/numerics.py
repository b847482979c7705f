"""The figures of two tensors' values: pure functions over arrays, no I/O.

`fold(figures, a, b)` returns the figures with one aligned piece of both tensors folded in, so a
streamed pass folds chunk after chunk and a batch folds once. Values are taken as float64 (complex
as complex128; bf16 and fp8 as `reader.pt2.dtypes.to_numpy` decodes them): `max_abs_diff`,
`relative_l2` = ||a - b|| / ||a||, `cosine` = <a, b> / (||a|| ||b||), `fraction_differ` (elements
whose values differ; NaN against NaN counts as equal). Pairs where either value is NaN or infinite
are left out of the norms and counted in `nonfinite`. Modules pool their tensors' sums
(`pooled_relative_l2`, `pooled_absolute_l2`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..pt2.dtypes import to_numpy

FOLD_ELEMENTS = 1 << 16  # figures are folded in blocks of this many elements (float64 temporaries)


@dataclass(frozen=True, slots=True)
class Figures:
    """How far apart two tensors' values are. The sums of squares are kept relative to `scale`
    (the largest magnitude seen), as BLAS's nrm2 does, so values near the float64 limit do not
    overflow them; modules aggregate tensors from these sums."""

    elements: int = 0
    elements_differ: int = 0
    nonfinite: int = 0
    max_abs_diff: float = 0.0
    scale: float = 0.0
    sum_sq_diff: float = 0.0  # sum |a - b|^2 / scale^2
    sum_sq_a: float = 0.0  # sum |a|^2 / scale^2
    sum_sq_b: float = 0.0
    dot: float = 0.0  # Re <a, b> / scale^2
    sampled: bool = False

    @property
    def relative_l2(self) -> float | None:
        """||a - b|| / ||a||; None when a is all zeros and b is not (infinitely far)."""
        if self.sum_sq_a == 0:
            return 0.0 if self.sum_sq_diff == 0 else None
        return finite(math.sqrt(self.sum_sq_diff) / math.sqrt(self.sum_sq_a))

    @property
    def cosine(self) -> float | None:
        """<a, b> / (||a|| ||b||); None when either is all zeros."""
        if self.sum_sq_a == 0 or self.sum_sq_b == 0:
            return None
        return finite(self.dot / (math.sqrt(self.sum_sq_a) * math.sqrt(self.sum_sq_b)))

    def repeated(self, times: int) -> Figures:
        """The figures of tensors in which every element pair of these stands `times` times (a
        view's stride-0 dims repeat what the others select)."""
        return dataclasses.replace(
            self,
            elements=self.elements * times,
            elements_differ=self.elements_differ * times,
            nonfinite=self.nonfinite * times,
            sum_sq_diff=self.sum_sq_diff * times,
            sum_sq_a=self.sum_sq_a * times,
            sum_sq_b=self.sum_sq_b * times,
            dot=self.dot * times,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_abs_diff": finite(self.max_abs_diff),
            "relative_l2": self.relative_l2,
            "cosine": self.cosine,
            "fraction_differ": self.elements_differ / self.elements if self.elements else 0.0,
            "elements_differ": self.elements_differ,
            "elements": self.elements,
            "nonfinite": self.nonfinite,
            "sampled": self.sampled,
        }


def fold(figures: Figures, a: np.ndarray, b: np.ndarray) -> Figures:
    """`figures` with one aligned piece of both tensors folded in (flat arrays of the tensors' own
    dtype), a block at a time, so the float64 temporaries stay small whatever the piece's size."""
    for start in range(0, a.size, FOLD_ELEMENTS):
        figures = _fold_block(figures, a[start : start + FOLD_ELEMENTS], b[start : start + FOLD_ELEMENTS])
    return figures


def flat(raw: bytes | memoryview, dtype: Any) -> np.ndarray:
    """A tensor's bytes as a flat array of its dtype (`reader.pt2.dtypes` decodes bf16 and fp8)."""
    return to_numpy(raw, dtype, (-1,))


def pooled_absolute_l2(figures: Sequence[Figures]) -> float | None:
    """sqrt(sum ||a_i - b_i||^2) over several tensors (None without figures), on a common scale."""
    if not figures:
        return None
    top = max(f.scale for f in figures)
    if top == 0:
        return 0.0
    return finite(top * math.sqrt(sum(f.sum_sq_diff * (f.scale / top) ** 2 for f in figures)))


def pooled_relative_l2(figures: Sequence[Figures]) -> float | None:
    """sqrt(sum ||a_i - b_i||^2 / sum ||a_i||^2) over several tensors, on a common scale."""
    top = max((f.scale for f in figures), default=0.0)
    if top == 0:
        return None
    diff = sum(f.sum_sq_diff * (f.scale / top) ** 2 for f in figures)
    base = sum(f.sum_sq_a * (f.scale / top) ** 2 for f in figures)
    return finite(math.sqrt(diff / base)) if base else None


def finite(value: float) -> float | None:
    """`value`, or None where it is NaN or infinite (JSON has no such numbers)."""
    return value if math.isfinite(value) else None


def _fold_block(f: Figures, a: np.ndarray, b: np.ndarray) -> Figures:
    """The usual block (every value finite, no square overflowing): four dot products and a
    subtraction; anything else takes the careful path, which masks and rescales."""
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    x, y = a.astype(wide), b.astype(wide)
    inner = _inner_complex if wide is np.complex128 else _inner_real
    with np.errstate(over="ignore", invalid="ignore"):
        d = x - y
        sums = (inner(d, d), inner(x, x), inner(y, y), inner(x, y))
    if not all(map(math.isfinite, sums)) or (sums[1] == 0 and x.any()) or (sums[2] == 0 and y.any()):
        return _fold_carefully(f, a, b)
    # compared in their own type (exact for 64-bit integers); bf16/fp8 (kind "V") as float64
    differ = int(np.count_nonzero(x != y if a.dtype.kind == "V" else a != b))
    f = dataclasses.replace(f, elements=f.elements + int(a.size), elements_differ=f.elements_differ + differ)
    if not x.size:
        return f
    scale = f.scale or 1.0
    unit = scale**2
    return dataclasses.replace(
        f,
        max_abs_diff=max(f.max_abs_diff, float(np.abs(d).max())),
        scale=scale,
        sum_sq_diff=f.sum_sq_diff + float(sums[0]) / unit,
        sum_sq_a=f.sum_sq_a + float(sums[1]) / unit,
        sum_sq_b=f.sum_sq_b + float(sums[2]) / unit,
        dot=f.dot + float(sums[3]) / unit,
    )


def _fold_carefully(f: Figures, a: np.ndarray, b: np.ndarray) -> Figures:
    """NaN and infinities left out (counted), squares taken relative to the largest magnitude."""
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    x, y = a.astype(wide), b.astype(wide)
    finite_pairs = np.isfinite(x) & np.isfinite(y)
    all_finite = bool(finite_pairs.all())
    differ = a != b  # in the tensor's own type: exact for 64-bit integers
    if not all_finite and a.dtype.kind not in "iub":  # floats, bf16/fp8 (kind "V"): NaN equals NaN
        differ &= ~(np.isnan(x) & np.isnan(y))
    f = dataclasses.replace(
        f,
        elements=f.elements + int(a.size),
        elements_differ=f.elements_differ + int(np.count_nonzero(differ)),
    )
    if not all_finite:
        f = dataclasses.replace(
            f, nonfinite=f.nonfinite + int(finite_pairs.size - np.count_nonzero(finite_pairs))
        )
        x, y = x[finite_pairs], y[finite_pairs]
    if not x.size:
        return f
    with np.errstate(over="ignore"):  # a difference of two values near the limit is inf
        d = x - y
    f = dataclasses.replace(f, max_abs_diff=max(f.max_abs_diff, float(np.abs(d).max())))
    top = max(float(np.abs(x).max()), float(np.abs(y).max()))
    if top > f.scale:
        shrink = (f.scale / top) ** 2
        f = dataclasses.replace(
            f,
            sum_sq_diff=f.sum_sq_diff * shrink,
            sum_sq_a=f.sum_sq_a * shrink,
            sum_sq_b=f.sum_sq_b * shrink,
            dot=f.dot * shrink,
            scale=top,
        )
    if f.scale == 0:
        return f
    if f.scale != 1.0 and not 1e-100 < f.scale < 1e100:  # rescale only where squares could overflow
        x, y = x / f.scale, y / f.scale
        d = x - y
        unit = 1.0
    else:
        unit = f.scale**2
    return dataclasses.replace(
        f,
        sum_sq_diff=f.sum_sq_diff + float(np.vdot(d, d).real) / unit,
        sum_sq_a=f.sum_sq_a + float(np.vdot(x, x).real) / unit,
        sum_sq_b=f.sum_sq_b + float(np.vdot(y, y).real) / unit,
        dot=f.dot + float(np.vdot(y, x).real) / unit,
    )


def _inner_real(x: np.ndarray, y: np.ndarray) -> float:
    """<x, y> of float64 arrays, in NumPy's own loop: np.vdot is slow for reals, and np.dot's
    threaded BLAS thrashes on a busy host for blocks this small (measured: far slower)."""
    return float(np.einsum("i,i->", x, y))


def _inner_complex(x: np.ndarray, y: np.ndarray) -> float:
    """Re <y, x> for complex arrays (|x|^2 when x is y)."""
    return float(np.vdot(y, x).real)
