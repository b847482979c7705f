"""Tensors handed from the reads on a BackgroundLoop to vLLM's synchronous `load_weights`, one at a
time: the reads put a tensor and wait until the consumer comes back for the next, so what it dropped
is free and `iter_load`'s memory budget, not a queue of tensors, bounds what is read ahead."""

from __future__ import annotations

import asyncio
import contextlib
import queue
from typing import Any

from ...blocking.loop import BackgroundLoop, LoopClosed


class Handover:
    def __init__(self, loop: BackgroundLoop) -> None:
        self.loop = loop
        self._items: queue.Queue[Any] = queue.Queue()
        self._asked = asyncio.Event()  # set by the consumer (on the loop's thread): the last one is done

    async def put(self, item: Any) -> None:
        """On the loop: hand `item` over, and return once the consumer is done with it."""
        self._items.put(item)
        del item
        await self._asked.wait()
        self._asked.clear()

    def end(self, item: Any) -> None:
        """From any thread: what ends the reads (a sentinel or an error), or an item not waited on."""
        self._items.put(item)

    def get(self) -> Any:
        """The consumer: the next item (blocks)."""
        return self._items.get()

    def done(self) -> None:
        """The consumer is done with the last item it got: the reads go on."""
        with contextlib.suppress(LoopClosed):
            self.loop.run(self._ask())

    async def _ask(self) -> None:
        self._asked.set()
