"""Byte ranges joined where the gap between them costs less than another request (sans-IO): the
one rule an open's reads, batched entry reads, block plans and `read_ranges_into` share."""

from __future__ import annotations

from collections.abc import Sequence

# Ranges closer than this are fetched as one: a gap costs less than a round trip.
COALESCE_GAP = 64 << 10


def coalesce(ranges: Sequence[tuple[int, int]], gap: int = COALESCE_GAP) -> list[tuple[int, int]]:
    """Merge [start, end) ranges that overlap or lie within `gap` of each other, sorted."""
    merged: list[list[int]] = []
    for start, end in sorted(ranges):
        if merged and start - merged[-1][1] <= gap:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]
