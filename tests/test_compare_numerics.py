"""reader.compare.numerics without I/O: the figures of two arrays, folded in pieces or at once,
against their definitions on the full arrays; pooled module figures."""

from __future__ import annotations

import numpy as np
import pytest

from reader.compare.numerics import FOLD_ELEMENTS, Figures, fold, pooled_absolute_l2, pooled_relative_l2

pytestmark = pytest.mark.unit


def test_figures_match_their_definitions_however_the_arrays_are_cut():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(3 * FOLD_ELEMENTS + 17).astype(np.float32)
    y = x.copy()
    y[::5] += 0.25
    whole = fold(Figures(), x, y)
    pieces = Figures()
    for start in range(0, x.size, 1000):
        pieces = fold(pieces, x[start : start + 1000], y[start : start + 1000])
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    for figures in (whole, pieces):
        assert figures.elements == x.size and figures.elements_differ == np.count_nonzero(x != y)
        assert figures.max_abs_diff == pytest.approx(np.abs(xf - yf).max())
        assert figures.relative_l2 == pytest.approx(np.linalg.norm(xf - yf) / np.linalg.norm(xf), rel=1e-12)
        assert figures.cosine == pytest.approx(xf @ yf / (np.linalg.norm(xf) * np.linalg.norm(yf)), rel=1e-12)
    assert fold(Figures(), x, y) == whole  # a pure function: the same arrays, the same figures


def test_folding_returns_new_figures_and_leaves_the_old_ones():
    start = Figures()
    after = fold(start, np.array([1.0, 2.0]), np.array([1.0, 3.0]))
    assert start == Figures() and after.elements == 2 and after.elements_differ == 1
    with pytest.raises(AttributeError):
        after.elements = 0  # type: ignore[misc]


def test_nan_and_infinity_are_counted_and_left_out_of_the_norms():
    x = np.array([1.0, np.nan, np.inf, 2.0])
    y = np.array([1.0, np.nan, 5.0, 4.0])
    figures = fold(Figures(), x, y)
    assert figures.nonfinite == 2 and figures.elements_differ == 2  # NaN against NaN is equal
    assert figures.max_abs_diff == 2.0
    assert figures.relative_l2 == pytest.approx(2 / np.sqrt(5))


def test_values_near_the_float64_limit_do_not_overflow_the_norms():
    x = np.array([1e300, -1e300, 1e300])
    figures = fold(Figures(), x, x * 0.5)
    assert figures.relative_l2 == pytest.approx(0.5) and figures.cosine == pytest.approx(1.0)


def test_integers_are_compared_exactly_in_their_own_type():
    x = np.array([2**62 + 1, 5], dtype=np.int64)
    y = np.array([2**62, 5], dtype=np.int64)  # equal as float64, not as int64
    assert fold(Figures(), x, y).elements_differ == 1


def test_modules_pool_their_tensors_and_a_change_from_zero_has_no_relative_figure():
    one = fold(Figures(), np.array([3.0, 4.0]), np.array([3.0, 5.0]))  # ||a - b|| = 1, ||a|| = 5
    two = fold(Figures(), np.array([0.0, 0.0]), np.array([0.0, 2.0]))  # from zero: ||a - b|| = 2
    assert two.relative_l2 is None and two.cosine is None
    assert pooled_relative_l2([one, two]) == pytest.approx(np.sqrt(5) / 5)
    assert pooled_absolute_l2([one, two]) == pytest.approx(np.sqrt(5))
    assert pooled_relative_l2([two]) is None and pooled_absolute_l2([two]) == pytest.approx(2.0)
    assert pooled_absolute_l2([]) is None
