"""The one rule for object keys and paths inside a location: no `.`, `..` or empty segment.

An HTTP client resolves `.` and `..` segments before it sends (and signs) a request, so
`s3://team/../other/secret` would read `/other/secret` with credentials given for `team`; an
empty segment is a different object on one store and the same on another. A key or path of an
s3://, gs://, az:// or hf:// location is therefore refused with such a segment, before any request.
"""

from __future__ import annotations

from ..errors import LocationError

DOT_SEGMENTS = frozenset({"", ".", ".."})


def bad_segment(key: str) -> bool:
    """Whether `key` has a `.`, `..` or empty `/`-separated segment (a leading or final `/` too)."""
    return any(segment in DOT_SEGMENTS for segment in key.split("/"))


def check_key(location: str, key: str, what: str) -> None:
    """LocationError if `key` (the `what` of `location`: an object key, a blob name) has such a segment."""
    if bad_segment(key):
        raise LocationError(
            f"{location!r}: the {what} {key[:80]!r} has a '.', '..' or empty segment; a request would "
            "read another object than the one named"
        )
