"""Byte-range planning shared by opening and batched reads."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from ..sources.spans import COALESCE_GAP, coalesce

__all__ = ["COALESCE_GAP", "coalesce", "containing"]


def containing(groups: Sequence[tuple[int, int]], start: int) -> int:
    """Index of the coalesced group holding `start` (groups sorted and disjoint)."""
    return bisect.bisect_right(groups, (start, float("inf"))) - 1
