"""Sans-IO HTTP semantics for byte bodies: Range, If-Range, If-None-Match (RFC 9110 §13, §14).

Pure functions over header strings and a body length; the response layer turns
the decision into status, headers and bytes. Every route that answers `Range` (tensors,
slices, bundles, .ptd files, ExecuTorch programs) does so through `decide` (app/responses.py's
BodyResponse), so its rules hold on every one: ranges that overlap or touch are coalesced into
one before anything is planned, so no answer carries a byte of the body twice (one request can
never ask for 16 copies of a tensor: RFC 9110 §14.2's "Apache Killer" note).
"""

from __future__ import annotations

import re
from typing import NamedTuple

# More ranges than this in one request (as asked, before any are joined) are ignored: answered
# with the whole body, as RFC 9110 §14.2 allows, rather than sorted and served as many parts.
MAX_RANGES = 16


# Decision, Part and BodyPlan are made on every request: named tuples, which cost a fraction of a
# frozen dataclass (one setattr call per field) to build.
class Decision(NamedTuple):
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
    if if_none_match is not None and matches_weakly(if_none_match, etag):
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
    return Decision(206, coalesce(ranges))


def coalesce(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Non-empty [start, end) ranges with those that overlap or touch joined into one (RFC 9110
    §15.3.7.2 lets a server coalesce them): the result is disjoint, so the parts of an answer
    carry at most the body's length between them. Ranges left apart keep the order in which they
    were asked for (a joined range takes the place of its first), as that section asks."""
    if len(ranges) < 2:
        return tuple(ranges)
    groups: list[list[int]] = []  # [start, end, index of the first range asked for in it]
    for index in sorted(range(len(ranges)), key=ranges.__getitem__):
        start, end = ranges[index]
        if groups and start <= groups[-1][1]:
            last = groups[-1]
            last[1], last[2] = max(last[1], end), min(last[2], index)
        else:
            groups.append([start, end, index])
    groups.sort(key=lambda group: group[2])
    return tuple((start, end) for start, end, _ in groups)


_ONE_RANGE = re.compile(r"bytes=([0-9]{1,19})-([0-9]{1,19})")  # the form clients send most


def parse_ranges(header: str, length: int) -> list[tuple[int, int]] | None:
    """Satisfiable [start, end) ranges of a `bytes=` header; None when the header is invalid."""
    one = _ONE_RANGE.fullmatch(header)
    if one is not None:  # the general rules below, for one `first-last` range
        first, last = int(one[1]), int(one[2])
        if last < first:
            return None
        return [(first, min(last + 1, length))] if first < length else []
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or not spec.strip():
        return None
    ranges = []
    for part in spec.split(","):
        first_text, dash, last_text = part.strip().partition("-")
        try:
            first, last = _number(first_text), _number(last_text)
        except ValueError:
            return None
        if not dash:
            return None
        if first is None:
            if last is None:
                return None
            if last > 0 and length > 0:
                ranges.append((max(0, length - last), length))
            continue
        end = length if last is None else last + 1
        start = first
        if last is not None and end <= start:
            return None
        if start < length:
            ranges.append((start, min(end, length)))
    return ranges


def _number(text: str) -> int | None:
    """A byte position (ASCII digits, at most 19), None if empty; ValueError for anything else."""
    text = text.strip()
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        raise ValueError(text)
    return int(text)


def content_range(start: int, end: int, length: int) -> bytes:
    return b"bytes %d-%d/%d" % (start, end - 1, length)


def matches_weakly(header: str, etag: str) -> bool:
    """If-None-Match uses weak comparison: W/ prefixes are ignored; * matches anything."""
    if header.strip() == "*":
        return True
    ours = etag.removeprefix("W/")
    return any(candidate.strip().removeprefix("W/") == ours for candidate in header.split(","))


class Part(NamedTuple):
    """One piece of a response body: `head` bytes (a multipart part header), then body bytes [start, end)."""

    head: bytes
    start: int
    end: int


class BodyPlan(NamedTuple):
    """What goes on the wire for a decision: status, the header fields it adds (as sent: lower-case
    names, Latin-1 bytes), the parts and their total."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    parts: tuple[Part, ...]
    closing: bytes
    length: int  # Content-Length


UNSATISFIABLE = b'{"error":{"code":"range_not_satisfiable","message":"no requested range overlaps the body"}}'


def plan_body(decision: Decision, length: int, media_type: str, boundary: str) -> BodyPlan:
    """Headers and parts of the response to `decision` for a body of `length` bytes of `media_type`."""
    if decision.status == 304:
        return BodyPlan(304, (), (), b"", 0)
    if decision.status == 416:
        headers = ((b"content-range", b"bytes */%d" % length), (b"content-type", b"application/json"))
        return BodyPlan(416, headers, (), b"", len(UNSATISFIABLE))
    kind = media_type.encode("latin-1")
    if decision.status == 206 and len(decision.ranges) == 1:
        start, end = decision.ranges[0]
        headers = ((b"content-range", content_range(start, end, length)), (b"content-type", kind))
        return BodyPlan(206, headers, (Part(b"", start, end),), b"", end - start)
    if decision.status == 206:
        separator = boundary.encode("latin-1")
        parts = tuple(
            Part(
                b"\r\n--%s\r\ncontent-type: %s\r\ncontent-range: %s\r\n\r\n"
                % (separator, kind, content_range(start, end, length)),
                start,
                end,
            )
            for start, end in decision.ranges
        )
        closing = b"\r\n--%s--\r\n" % separator
        total = sum(len(part.head) + part.end - part.start for part in parts) + len(closing)
        headers = ((b"content-type", b"multipart/byteranges; boundary=" + separator),)
        return BodyPlan(206, headers, parts, closing, total)
    return BodyPlan(decision.status, ((b"content-type", kind),), (Part(b"", 0, length),), b"", length)
