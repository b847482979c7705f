"""The `Content-Range` header (RFC 9110 section 14.4), parsed once for every reader of one (sans-IO).

A 206 names the range it holds (`bytes first-last/total`), a 416 the object's size
(`bytes */total`), and each part of a `multipart/byteranges` answer its range: every one of them
is read by `parse_content_range`, so a header one reader takes is taken by all of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# ASCII digits only (a header is Latin-1 text); the unsatisfied form has no range, `*` no total
_VALUE = re.compile(r"bytes (?:([0-9]+)-([0-9]+)|\*)/([0-9]+|\*)")


@dataclass(frozen=True)
class ContentRange:
    """`bytes first-last/total`: `first` and `last` inclusive, as the header names them; None for
    `bytes */total` (no range: an unsatisfiable request's answer); `total` None for `/*`."""

    first: int | None
    last: int | None
    total: int | None

    @property
    def satisfied(self) -> bool:
        """A range of an object of known size, first to last within it."""
        return (
            self.first is not None
            and self.last is not None
            and self.total is not None
            and self.first <= self.last < self.total
        )


def parse_content_range(value: str | bytes | None) -> ContentRange | None:
    """The header's value (surrounding whitespace ignored) as a ContentRange; None: not one."""
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    found = _VALUE.fullmatch(text.strip())
    if found is None:
        return None
    first, last, total = (None if group in (None, "*") else int(group) for group in found.groups())
    return ContentRange(first, last, total)
