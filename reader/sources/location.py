"""A location's scheme, read one way everywhere: `S3://bucket/key` is an s3:// location.

URL schemes are case-insensitive (RFC 3986 3.1), so the router, each store's parser, the cache key
and the service's open patterns all split a location here and compare the lower-cased scheme.
"""

from __future__ import annotations

from typing import NamedTuple


class Location(NamedTuple):
    scheme: str  # lower-cased; "" for a path (no "://")
    rest: str  # what follows "://" (the whole location for a path)


def split_location(location: str) -> Location:
    """`location` as (scheme lower-cased, the rest after "://"); a path has scheme ""."""
    scheme, sep, rest = location.partition("://")
    return Location(scheme.lower(), rest) if sep else Location("", location)


def rest_of(location: str, scheme: str) -> str | None:
    """What follows `scheme`:// in `location` (any case of the scheme), or None for another scheme."""
    found = split_location(location)
    return found.rest if found.scheme == scheme else None


__all__ = [
    "Location",
    "rest_of",
    "split_location",
]
