"""The memory budget of everything that streams: bytes read ahead of the consumer, bounded.

A streaming read (`iter_load`, the vLLM loader) holds landed-but-not-consumed plus in-flight bytes.
`Budget` counts them: a read takes its bytes (`take`) before it is launched and waits while they
would not fit; the bytes are given back (`give`) once the consumer is done with what they hold, so
reads never run further ahead than `capacity` (backpressure, not a bigger queue). A part larger
than the whole budget is still read: alone, once nothing else is held.

One rule for every streaming path: `max_buffered` (a keyword) or `PT2SERVE_MAX_BUFFERED` (the
service's and the vLLM format's setting), checked here (`budget_bytes`).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import warnings

# Chosen by measurement (bench/README.md, `stream_memory.py`): a bigger budget streamed no faster, and
# safe_open's reads ahead held more with it.
DEFAULT_MAX_BUFFERED = 256 << 20
ENVIRONMENT = "PT2SERVE_MAX_BUFFERED"


class BudgetWarning(UserWarning):
    """A budget smaller than one part it must hold: that part is read alone."""


def budget_bytes(max_buffered: int | None = None, setting: str = "max_buffered") -> int:
    """`max_buffered` checked (a positive int), else `PT2SERVE_MAX_BUFFERED`, else the default."""
    if max_buffered is None:
        text = os.environ.get(ENVIRONMENT, "").strip()
        if not text:
            return DEFAULT_MAX_BUFFERED
        try:
            max_buffered = int(text)
        except ValueError:
            raise ValueError(f"{ENVIRONMENT}={text!r} is not a number of bytes") from None
        setting = ENVIRONMENT
    if isinstance(max_buffered, bool) or not isinstance(max_buffered, int):
        raise TypeError(f"{setting} is a number of bytes, not {type(max_buffered).__name__}")
    if max_buffered <= 0:
        raise ValueError(f"{setting} must be a positive number of bytes, not {max_buffered}")
    return max_buffered


class Budget:
    """At most `capacity` bytes taken at once; takers are served in the order they asked."""

    def __init__(self, capacity: int) -> None:
        self.capacity = budget_bytes(capacity)
        self.held = 0
        self.peak = 0  # the most held at once (what tests and benches look at)
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self._warned = False

    async def take(self, nbytes: int) -> None:
        """Wait until `nbytes` fit (or, bigger than the budget, until nothing else is held)."""
        if nbytes > self.capacity and not self._warned:
            self._warned = True
            warnings.warn(
                f"max_buffered ({self.capacity} bytes) is smaller than one part of {nbytes} bytes: "
                "raised to that part, which is read alone",
                BudgetWarning,
                stacklevel=2,
            )
        if not self._waiting and self._fits(nbytes):
            self._hold(nbytes)
            return
        turn = asyncio.get_running_loop().create_future()
        self._waiting.append((nbytes, turn))
        try:
            await turn
        except BaseException:
            if turn.done() and not turn.cancelled():  # granted as it was cancelled: hand it back
                self.give(nbytes)
            else:
                self._waiting.remove((nbytes, turn))
                self._wake()
            raise

    def give(self, nbytes: int) -> None:
        """`nbytes` taken earlier are free again."""
        self.held -= nbytes
        self._wake()

    def _fits(self, nbytes: int) -> bool:
        return self.held == 0 or self.held + nbytes <= self.capacity

    def _hold(self, nbytes: int) -> None:
        self.held += nbytes
        self.peak = max(self.peak, self.held)

    def _wake(self) -> None:
        while self._waiting and self._fits(self._waiting[0][0]):
            nbytes, turn = self._waiting.popleft()
            self._hold(nbytes)
            turn.set_result(None)


class Ledger:
    """What a streaming read holds, by range: the bytes one range took are given back once every
    storage it holds was handed over and the consumer came back for more (`consumed`)."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self._open: dict[int, tuple[int, set[str]]] = {}  # range id -> bytes, storages not yet consumed
        self._range_of: dict[str, int] = {}
        self._ids = itertools.count()

    async def take(self, nbytes: int, names: list[str]) -> None:
        await self.budget.take(nbytes)
        key = next(self._ids)
        self._open[key] = (nbytes, set(names))
        for name in names:
            self._range_of[name] = key

    def consumed(self, names: list[str]) -> None:
        for name in names:
            key = self._range_of.pop(name, None)
            if key is None:  # not charged (zeros, a shard's blocks)
                continue
            nbytes, pending = self._open[key]
            pending.discard(name)
            if not pending:
                del self._open[key]
                self.budget.give(nbytes)

    def release_all(self) -> None:
        """The read ended or was left: everything it held is free."""
        for nbytes, _ in self._open.values():
            self.budget.give(nbytes)
        self._open.clear()
        self._range_of.clear()
