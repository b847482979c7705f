"""The CPU-bound steps of an open, off the event loop and under one time budget.

Every step of an open that interprets the archive's bytes (the central directory, inflating the
metadata entries, configs and pickles, the index) runs through `ParseBudget.run`:

- on a worker thread, so an event loop that serves other requests keeps answering while an archive
  is parsed (one hop costs tens of microseconds; an open takes two or three);
- with a `Deadline` for what is left of the open's budget, which the parsers whose work an archive
  can make long (the pickle machine, the walk of a checkpoint's object) check as they go; each step
  is timed too, so a step that does not check still fails the open once the budget is spent. The
  budget counts parsing only, not the reads between the steps;
- as the one place where an open's parse failures become the library's errors: anything a parser
  raises that is not a ReaderError (RecursionError, MemoryError, a parser's ValueError) is an
  ArchiveFormatError naming the archive, with the original as its cause.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import TypeVar

from ..deadline import Deadline, ParseTimeout
from ..errors import ArchiveFormatError, ReaderError

T = TypeVar("T")

DEFAULT_PARSE_TIMEOUT = 30.0
"""Seconds an open may spend parsing unless PT2SERVE_PARSE_TIMEOUT or the caller says otherwise: far
above what real archives take (a state dict of 10,000 tensors lists in well under a second), and a
bound on what a hostile one can cost."""


def parse_timeout_for(seconds: float | None) -> float:
    """The parse budget of an open: `seconds`, else PT2SERVE_PARSE_TIMEOUT, else the default."""
    if seconds is None:
        seconds = float(os.environ.get("PT2SERVE_PARSE_TIMEOUT") or DEFAULT_PARSE_TIMEOUT)
    if not seconds > 0:
        raise ValueError(f"parse_timeout must be a number of seconds > 0, not {seconds!r}")
    return seconds


class ParseBudget:
    """One open's parse budget: `seconds` of parsing in all, spent step by step."""

    def __init__(self, seconds: float, where: str) -> None:
        self.seconds = seconds
        self.left = seconds
        self.where = where

    async def run(self, step: Callable[[Deadline], T]) -> T:
        """`step(deadline)` on a worker thread; its result, or the ReaderError saying why not."""
        deadline = Deadline(self.left, f"{self.where}: parsing took more than {self.seconds:g} s")

        def timed() -> T:
            started = time.monotonic()
            deadline.at = started + self.left  # the budget starts when the step does, not when queued
            try:
                return step(deadline)
            finally:
                self.left -= time.monotonic() - started

        try:
            result = await asyncio.to_thread(timed)
        except asyncio.CancelledError:
            deadline.expire()  # the thread stops at its next check
            raise
        except ReaderError:
            raise
        except Exception as exc:
            detail = str(exc) or "no message"
            raise ArchiveFormatError(
                f"{self.where}: cannot be parsed ({type(exc).__name__}: {detail[:200]})"
            ) from exc
        if self.left < 0:
            raise ParseTimeout(f"{self.where}: parsing took more than {self.seconds:g} s")
        return result
