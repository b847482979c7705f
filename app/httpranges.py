"""Sans-IO HTTP semantics for byte bodies: Range, If-Range, If-None-Match (RFC 9110 §13, §14).

Pure functions over header strings and a body length; the response layer turns
the decision into status, headers and bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

# More ranges than this in one request are ignored (answered with the whole body,
# as RFC 9110 §14.2 allows) rather than served as a huge multipart response.
MAX_RANGES = 16


@dataclass(frozen=True)
class Decision:
    """What to send: 200 (whole), 206 (ranges), 304 (not modified) or 416 (unsatisfiable)."""

    status: int
    ranges: tuple[tuple[int, int], ...] = ()  # [start, end) byte ranges for 206


def decide(
    length: int,
    etag: str,
    *,
    range_header: str | None,
    if_none_match: str | None,
    if_range: str | None,
) -> Decision:
    if if_none_match is not None and _matches_weakly(if_none_match, etag):
        return Decision(304)
    if range_header is None:
        return Decision(200)
    if if_range is not None and if_range.strip() != etag:
        return Decision(200)  # If-Range needs a strong match; dates never match a strong ETag here
    ranges = parse_ranges(range_header, length)
    if ranges is None:
        return Decision(200)  # not a bytes range we understand: ignore it
    if not ranges:
        return Decision(416)
    if len(ranges) > MAX_RANGES:
        return Decision(200)
    return Decision(206, tuple(ranges))


def parse_ranges(header: str, length: int) -> list[tuple[int, int]] | None:
    """Satisfiable [start, end) ranges of a `bytes=` header; None when the header is invalid."""
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or not spec.strip():
        return None
    ranges = []
    for part in spec.split(","):
        first, dash, last = part.strip().partition("-")
        first, last = first.strip(), last.strip()
        if not dash or not (first.isdigit() or first == "") or not (last.isdigit() or last == ""):
            return None
        if first == "":
            if last == "":
                return None
            suffix = int(last)
            if suffix > 0 and length > 0:
                ranges.append((max(0, length - suffix), length))
            continue
        start = int(first)
        end = length if last == "" else int(last) + 1
        if last != "" and end <= start:
            return None
        if start < length:
            ranges.append((start, min(end, length)))
    return ranges


def content_range(start: int, end: int, length: int) -> str:
    return f"bytes {start}-{end - 1}/{length}"


def _matches_weakly(header: str, etag: str) -> bool:
    """If-None-Match uses weak comparison: W/ prefixes are ignored; * matches anything."""
    if header.strip() == "*":
        return True
    ours = etag.removeprefix("W/")
    return any(candidate.strip().removeprefix("W/") == ours for candidate in header.split(","))
