"""A time budget the CPU-bound parsers check as they go.

An archive is parsed on a worker thread (reader/entries/parsing.py), and a thread cannot be stopped
from outside: a parser whose work grows with what an archive declares (the pickle machine, the walk
of a checkpoint's object) calls `check()` every few thousand steps and stops itself, with
`ParseTimeout`, once the budget of its open is spent. `check()` costs one clock read.
"""

from __future__ import annotations

import math
import time

from .errors import ArchiveFormatError


class ParseTimeout(ArchiveFormatError):
    """Parsing an archive took longer than its open's time budget."""


class Deadline:
    """The moment (monotonic clock) a parse must stop by; `what` is the error's message."""

    __slots__ = ("at", "what")

    def __init__(self, seconds: float = math.inf, what: str = "parsing took longer than its budget") -> None:
        self.at = time.monotonic() + seconds
        self.what = what

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise ParseTimeout(self.what)

    def expire(self) -> None:
        """Stop the parse at its next check (its caller went away)."""
        self.at = -math.inf


NO_DEADLINE = Deadline()
"""A deadline that never passes: sans-IO parsers called on their own (tests, tools)."""
