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
from collections.abc import Callable, Sequence

CONFIDENCE = 0.95


def order(labels: Sequence[str], turn: int) -> list[str]:
    """The contenders' order in round `turn`: a Williams design, so that over a cycle of rounds each
    contender runs right after every other one equally often. A fixed or rotated order leaves one
    contender behind the same neighbour most rounds, and what a run leaves behind (a server's heap to
    collect, a warm path) then leans on one side. A fixed order once made one read mark look best,
    and rotating the rounds took the lead away (bench/README.md, seventh pass)."""
    n = len(labels)
    first, low, high = [0], 1, n - 1
    while low <= high:
        first.append(low)
        if low != high:
            first.append(high)
        low, high = low + 1, high - 1
    rows = [[(index + shift) % n for index in first] for shift in range(n)]
    if n % 2:  # an odd count needs each row reversed as well
        rows += [row[::-1] for row in rows]
    return [labels[index] for index in rows[turn % len(rows)]]


def alternate(contenders: dict[str, Callable[[], float]], repeat: int) -> dict[str, list[float]]:
    """Each contender's results over `repeat` rounds, run one after another in `order`."""
    results: dict[str, list[float]] = {label: [] for label in contenders}
    for turn in range(repeat):
        for label in order(list(contenders), turn):
            results[label].append(contenders[label]())
    return results


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


def compare(seconds: dict[str, list[float]], ours: str, base: str, target: float | None = None) -> str:
    """`describe` of each round's ratio of two contenders' seconds (base / ours: above 1, ours is faster)."""
    ratios = [theirs / mine for mine, theirs in zip(seconds[ours], seconds[base])]
    return f"{ours} / {base}: {describe(ratios, target)}"
