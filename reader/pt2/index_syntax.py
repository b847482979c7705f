"""The text of a slice (`?slice=0:128,:,4:8`): one grammar, the parser and the OpenAPI `pattern`.

`INDEX_SYNTAX` is the whole grammar, written once as a regular expression that means the same
in Python and in ECMA-262 (what a JSON Schema `pattern` is read as): the service documents it as
the `slice` parameter's pattern, and `parse_index` accepts a text exactly when it matches. So a
text the document calls valid always parses, and one it calls invalid never does. What no
grammar can say is whether an index fits a given tensor (`7` on a dim of 4, three indices on a
matrix): `normalize_index` decides that against the sizes (IndexError).

The grammar: entries split by commas (spaces allowed around them); an entry is an integer,
`start:stop` or `start:stop:step` with each part optional, or `...` (at most once). Integers are
decimal with an optional `-` (never a sign without digits); a step is never zero.
"""

from __future__ import annotations

import re
from types import EllipsisType

_INT = r"-?[0-9]+"
_STEP = r"-?0*[1-9][0-9]*"  # an integer that is not zero
_SLICE = rf"(?:{_INT})?:(?:{_INT})?(?::(?:{_STEP})?)?"
_ENTRY = rf"(?:{_SLICE}|{_INT})"
_SEP = " *, *"
_ELLIPSIS = r"\.\.\."
_ENTRIES = rf"{_ENTRY}(?:{_SEP}{_ENTRY})*"
# empty | entries [, ... [, entries]] | ... [, entries]
INDEX_SYNTAX = (
    rf"^ *(?:{_ENTRIES}(?:{_SEP}{_ELLIPSIS}(?:{_SEP}{_ENTRIES})?)?|{_ELLIPSIS}(?:{_SEP}{_ENTRIES})?)? *$"
)
_GRAMMAR = re.compile(INDEX_SYNTAX)

# An integer of more digits than this lies past the end of any dim there can be: it is read as
# ±10**DIGITS (the same selection), so no text makes Python convert thousands of digits.
DIGITS = 30

Entry = int | slice | EllipsisType


def parse_index(text: str) -> tuple[Entry, ...]:
    """The index a query text means, NumPy's syntax without brackets: "0:128,:,4:8", "-1",
    "::2", "...,0". An empty text is the whole tensor. ValueError for a text INDEX_SYNTAX refuses."""
    if _GRAMMAR.fullmatch(text) is None:
        raise ValueError(
            f"{text!r}: entries are integers, start:stop:step slices (step not 0) or one '...', "
            "split by commas"
        )
    text = text.strip()
    if not text:
        return ()
    return tuple(_entry(part.strip()) for part in text.split(","))


def _entry(part: str) -> Entry:
    if part == "...":
        return Ellipsis
    if ":" in part:
        return slice(*(_integer(bound) if bound else None for bound in part.split(":")))
    return _integer(part)


def _integer(digits: str) -> int:
    negative = digits.startswith("-")
    magnitude = digits.lstrip("-").lstrip("0")
    value = 10**DIGITS if len(magnitude) > DIGITS else int(magnitude or "0")
    return -value if negative else value


__all__ = ["DIGITS", "INDEX_SYNTAX", "parse_index"]
