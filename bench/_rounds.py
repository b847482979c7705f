"""How far a row's verdict stands from the host's noise: each round's ratio and the median's interval.

The contenders of a row alternate, so each round's pair of runs shared the host's state, and each
round gives one ratio. The median of those ratios has a distribution-free confidence interval
between two order statistics (the sign test's: no assumption about the noise's shape). A target
inside that interval is one this run cannot tell from the contenders' noise: a verdict on either
side of it says more about the host than about the code. (The rows' verdicts stay the ratio of the
contenders' medians, as their targets were set; the rounds' own median can differ from it.)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

CONFIDENCE = 0.95


def interval(ratios: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float] | None:
    """(low, high, coverage) of the median of `ratios`: the innermost pair of order statistics that
    still covers it with at least `confidence`; None with too few rounds for one (fewer than 6)."""
    values = sorted(ratios)
    n = len(values)
    tail = 0.0  # P(fewer than k of n fall below the median), Binomial(n, 1/2)
    k = 0
    while True:
        below = tail + math.comb(n, k) / 2**n
        if 1 - 2 * below < confidence:
            break
        tail, k = below, k + 1
    if k == 0:
        return None
    return values[k - 1], values[n - k], 1 - 2 * tail


def describe(ratios: Sequence[float], target: float | None = None) -> str:
    """The sorted ratios, their median and its interval, and whether the interval holds the target."""
    values = sorted(ratios)
    text = f"rounds {' '.join(f'{r:.2f}' for r in values)}; their median {statistics.median(values):.2f}"
    bounds = interval(values)
    if bounds is None:
        return text + " (too few rounds for an interval)"
    low, high, coverage = bounds
    text += f", {coverage:.0%} interval {low:.2f} - {high:.2f}"
    if target is not None and low <= target <= high:
        text += f": holds the target {target}x, this run cannot tell"
    return text
