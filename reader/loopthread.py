"""An event loop on a daemon thread of its own, for synchronous handles that keep an archive open
across calls (a DCP StorageReader): the archive's connections belong to one loop, whichever thread
calls, and a call from inside a running loop (a notebook) does not nest loops."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """`run(coroutine)` runs it on the thread's loop and waits; `submit` returns its future. A loop
    made before a fork is not the child's: `alive` is False there, and the owner makes a new one."""

    def __init__(self, name: str = "pt2serve-loop") -> None:
        self._pid = os.getpid()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._pid == os.getpid() and self._thread.is_alive()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """The coroutine's result; interrupted (Ctrl-C), the coroutine is cancelled."""
        future = self.submit(coroutine)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        """Stop the loop and its thread (nothing may be running on it); a no-op after a fork."""
        if not self.alive:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
