"""BackgroundLoop: an event loop in a thread of its own, for a synchronous handle that keeps an
async archive open between calls (`reader.safe_open`, `reader.torch.StorageReader`).

An archive's sources (HTTP clients, open files, tasks) belong to the loop they were opened on, so
a handle used from plain threads keeps that loop alive in one daemon thread for its whole life, and
every call, from any thread, runs a coroutine there (`asyncio.run_coroutine_threadsafe`) and waits
for its result: calls from several threads run concurrently on the one loop. `reader.load`'s
one-call form (sync.py) opens and closes per call instead, so it needs no thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopClosed(RuntimeError):
    """The loop has stopped (its handle was closed), or it belongs to the process this one was
    forked from (a forked child has no copy of its thread)."""


class BackgroundLoop:
    """A running event loop in a daemon thread: `run(coroutine)` from any other thread, `close()`."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._pid = os.getpid()
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:  # stopped by close(): end what is left, as asyncio.run does, then close the loop
            leftovers = asyncio.all_tasks(self._loop)
            for task in leftovers:
                task.cancel()
            if leftovers:
                self._loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    @property
    def usable(self) -> bool:
        """True while calls can run: not closed, and in the process that started the loop."""
        return not self._closed and os.getpid() == self._pid

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start `coroutine` on the loop; its future, to wait on from another thread."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("a BackgroundLoop cannot wait for itself: call it from another thread")
        with self._lock:  # submitted before close() stops the loop, or refused: never left waiting
            if not self.usable:
                coroutine.close()
                if os.getpid() != self._pid:
                    raise LoopClosed("opened in another process (before a fork): open it again in this one")
                raise LoopClosed("closed")
            return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the loop and wait for its result (its exception is raised here). If
        the wait is interrupted (KeyboardInterrupt), the coroutine is cancelled."""
        future = self.submit(coroutine)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        """Stop the loop (tasks still running are cancelled) and wait for its thread. Idempotent;
        in a forked child it only forgets the parent's loop."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if os.getpid() != self._pid:
                return
            self._loop.call_soon_threadsafe(self._loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join()
