"""Tensors read ahead of a loop that asks for them one at a time, in a known order, within a budget.

safetensors' surface reads one tensor per call (`get_tensor`), and the loaders written against it
(vLLM's and SGLang's `safetensors_weights_iterator`) ask for every key in `keys()` order: one read
after the other, nothing in flight while the caller works. `ReadAhead` reads the names after the
one asked for in the background, AT_ONCE at a time, each taking its bytes from a `Budget` before it
is launched and giving them back when it is handed out (or dropped), so the reads never hold more
than the budget (a tensor bigger than the budget is read alone; the one asked for counts too). A
name asked for out of turn drops what was read ahead and starts again after it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence

import numpy as np

from .budget import Budget

AT_ONCE = 4  # reads in flight: a tensor's read is parts already; a few keep the link busy between them


class ReadAhead:
    """`get(name)`: the bytes `read(name)` returns, read ahead when `name` follows the last one asked
    for in `order`. Runs on one event loop (every call from it)."""

    def __init__(
        self,
        read: Callable[[str], Awaitable[np.ndarray]],
        sizes: Mapping[str, int],
        order: Sequence[str],
        budget: Budget,
    ) -> None:
        self._read = read
        self._sizes = sizes
        self._order = list(order)
        self._position = {name: index for index, name in enumerate(self._order)}
        self.budget = budget
        self._ahead: dict[str, asyncio.Task[np.ndarray]] = {}
        self._runner: asyncio.Task[None] | None = None

    async def get(self, name: str) -> np.ndarray:
        size = self._sizes[name]
        task = self._ahead.pop(name, None)
        if task is None:  # not read ahead: read it now (within the budget too), and ahead from there
            await self.stop()
            await self.budget.take(size)
            self._start(name)
            try:
                return await self._read(name)
            finally:
                self.budget.give(size)
        try:
            return await task
        finally:
            self.budget.give(size)

    def _start(self, after: str) -> None:
        position = self._position.get(after)
        if position is not None and position + 1 < len(self._order):
            self._runner = asyncio.ensure_future(self._run(self._order[position + 1 :]))

    async def _run(self, names: Sequence[str]) -> None:
        gate = asyncio.Semaphore(AT_ONCE)

        async def fetch(name: str) -> np.ndarray:
            try:
                return await self._read(name)
            finally:
                gate.release()

        for name in names:
            await gate.acquire()
            await self.budget.take(self._sizes[name])
            task = asyncio.ensure_future(fetch(name))
            task.add_done_callback(_quiet)  # its failure is raised by `get`, if it is asked for
            self._ahead[name] = task

    async def stop(self) -> None:
        """Stop reading ahead and drop what was read ahead (its bytes given back)."""
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
            self._runner = None
        for name, task in self._ahead.items():
            task.cancel()
            self.budget.give(self._sizes[name])
        self._ahead.clear()


def _quiet(task: asyncio.Task[np.ndarray]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" for one nobody asked for
