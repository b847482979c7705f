"""When a remote read tries again: the failures worth it, capped and jittered back-off, budgets.

Connect errors, 408/429/5xx and bodies cut mid-stream are retried with capped, jittered exponential
backoff (Retry-After honoured, up to `max_retry_after`) within `HttpOptions.max_attempts` and
`time_budget`. A failure where no answer came at all (refused, unresolved, every attempt timed out)
ends as `OriginUnreachable`, so a cache can serve its last complete version; any other as
`SourceError`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx

from ...errors import OriginUnreachable, SourceError
from .options import HttpOptions

T = TypeVar("T")


class Retry(Exception):
    """A failure worth another attempt (after `delay` seconds if the server said so); `unreachable`:
    no answer came at all (the request never got a response), as opposed to an HTTP status or a
    body cut short."""

    def __init__(self, message: str, delay: float | None = None, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.delay = delay
        self.unreachable = unreachable


def deadline(options: HttpOptions) -> float | None:
    """When the time budget of a read starting now runs out (monotonic clock); None: no budget."""
    budget = options.time_budget
    return None if budget is None else time.monotonic() + budget


def remaining(until: float | None) -> float | None:
    return None if until is None else max(0.0, until - time.monotonic())


def check_deadline(until: float | None, location: str) -> None:
    if until is not None and time.monotonic() > until:
        raise SourceError(f"{location}: time budget spent before the transfer finished")


def retry_after(response: httpx.Response, cap: float) -> float | None:
    value = response.headers.get("retry-after", "").strip()
    if value.isdigit():
        return min(float(value), cap)
    return None


async def back_off(
    problem: Retry, attempt: int, until: float | None, options: HttpOptions, location: str
) -> None:
    """Wait before attempt `attempt + 1`, or raise if the attempts or the time budget are spent."""
    failed = OriginUnreachable if problem.unreachable else SourceError  # no answer, or a bad one
    if attempt >= options.max_attempts:
        raise failed(f"{location}: giving up after {attempt} attempts: {problem}")
    delay = problem.delay
    if delay is None:
        delay = min(options.backoff_cap, options.backoff_base * 2 ** (attempt - 1))
        delay *= random.uniform(0.5, 1.0)
    if until is not None and time.monotonic() + delay > until:
        raise failed(f"{location}: time budget of {options.time_budget}s spent: {problem}")
    await asyncio.sleep(delay)


async def retrying(attempt_once: Callable[[], Awaitable[T]], options: HttpOptions, location: str) -> T:
    """`attempt_once()` until it returns, backing off after each `Retry`, within the budgets."""
    until = deadline(options)
    attempt = 0
    last: Retry | None = None
    while True:
        try:
            async with asyncio.timeout(remaining(until)):  # not wait_for: see http1/pool.py
                return await attempt_once()
        except TimeoutError:
            failed = OriginUnreachable if last is None or last.unreachable else SourceError
            raise failed(f"{location}: time budget of {options.time_budget}s spent") from None
        except Retry as problem:
            attempt += 1
            last = problem
            await back_off(problem, attempt, until, options, location)
