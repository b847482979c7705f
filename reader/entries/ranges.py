"""Byte ranges (sans-IO): planning shared by opening and batched reads, and the checks of a read range."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from .. import zipfmt
from ..sources.spans import COALESCE_GAP, coalesce
from ..zipfmt import ZipEntry

__all__ = ["COALESCE_GAP", "coalesce", "containing"]


def containing(groups: Sequence[tuple[int, int]], start: int) -> int:
    """Index of the coalesced group holding `start` (groups sorted and disjoint)."""
    return bisect.bisect_right(groups, (start, float("inf"))) - 1


def check_range(entry: ZipEntry, start: int, end: int) -> None:
    """Content bytes [start, end) lie within the entry."""
    if not 0 <= start <= end <= entry.size:
        raise ValueError(f"range [{start}, {end}) is outside entry {entry.name!r} ({entry.size} bytes)")


def verify_whole(entry: ZipEntry, start: int, end: int, data: bytes | memoryview) -> None:
    """Bytes [start, end) of a stored entry, checked against its CRC-32 when they are all of it
    (the CRC covers the whole entry; a part of it cannot be checked on its own)."""
    if start == 0 and end == entry.size:
        zipfmt.verify_crc(entry, zipfmt.crc32(data))
