"""One big byte range as parts fetched over several connections at once: handed out in order
(`ordered_parts`), or each received into its slice of the caller's buffer (`parts_into`).

This is how the fastest object-storage clients read (AWS CRT, s5cmd, hf_transfer, aria2c):
servers and CDNs cap each connection's rate, so N connections move up to N times the bytes.

- Parts are fetched by `fetch(start, end)`, an async iterator that retries and resumes on its
  own (the single-stream reader), so one part cut mid-body costs that part a resume, not the
  whole read; every request it makes is pinned to the object version seen at open.
- At most `parts_in_flight` parts exist at once, each holding at most `part_size` bytes:
  that product bounds the memory. The head part is handed out as its bytes arrive.
- The first failing part fails the read at once (the other parts are cancelled), and a
  consumer that stops early cancels every part: no task and no connection outlives the read.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import NamedTuple

from ...tasks import task_group
from .options import HttpOptions
from .speed import PROBE_BYTES, rate


class Parts(NamedTuple):
    """How a big read is split: parts of `part_size` bytes, up to `parts_in_flight` at once; with
    `fast_connection` (bytes/s) the first part is timed alone, and one connection at least that
    fast reads the rest by itself."""

    part_size: int
    parts_in_flight: int
    fast_connection: float | None = None


def parts_for(options: HttpOptions, size: int) -> Parts | None:
    """How a read of `size` bytes is split as `options` say; None: one connection."""
    if options.parallel_parts > 1 and size > max(options.parallel_above, options.part_size):
        return Parts(options.part_size, options.parallel_parts, options.fast_connection)
    return None


class _Part:
    """One part's bytes as they arrive, and how its fetch ended."""

    __slots__ = ("chunks", "done", "end", "error", "received", "start", "task")

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.chunks: deque[bytes] = deque()
        self.received = 0
        self.done = False
        self.error: Exception | None = None
        self.task: asyncio.Task[None] | None = None


async def _fill(part: _Part, fetch: Callable[[int, int], AsyncIterator[bytes]], wake: asyncio.Event) -> None:
    try:
        async with aclosing(fetch(part.start, part.end)) as chunks:
            async for chunk in chunks:
                part.chunks.append(chunk)
                part.received += len(chunk)
                wake.set()
    except Exception as exc:  # handed to the consumer; cancellation propagates as usual
        part.error = exc
    finally:
        part.done = True
        wake.set()


def split(start: int, end: int, part_size: int) -> list[tuple[int, int]]:
    """[start, end) as consecutive parts of part_size bytes (the last one shorter)."""
    return [(at, min(at + part_size, end)) for at in range(start, end, part_size)]


async def ordered_parts(
    fetch: Callable[[int, int], AsyncIterator[bytes]],
    start: int,
    end: int,
    how: Parts,
) -> AsyncIterator[bytes]:
    """Bytes [start, end) in order, fetched as parts up to `parts_in_flight` at a time.

    With `fast_connection` (bytes/s), the first part is fetched alone and timed: if its first
    bytes (up to PROBE_BYTES) arrive at least that fast, one connection is not capped and more
    would only cost CPU (on loopback 8 connections ran slower than one), so the rest of the range
    follows as one request read at the consumer's pace (the transport's read-ahead bounds its
    memory); otherwise the other parts start at once.
    """
    part_size, parts_in_flight, fast_connection = how
    waiting = deque(split(start, end, part_size))
    running: deque[_Part] = deque()
    wake = asyncio.Event()
    limit = parts_in_flight if fast_connection is None else 1

    def launch() -> None:
        while waiting and len(running) < limit:
            part = _Part(*waiting.popleft())
            part.task = asyncio.create_task(_fill(part, fetch, wake))
            running.append(part)

    try:
        launch()
        began = time.monotonic()
        probing = fast_connection is not None
        rest: tuple[int, int] | None = None
        while running:
            head = running[0]
            while True:
                while head.chunks:
                    yield head.chunks.popleft()
                failed = next((part for part in running if part.error is not None), None)
                if failed is not None:
                    raise failed.error  # type: ignore[misc]
                if probing and (head.received >= PROBE_BYTES or head.done):
                    probing = False
                    if rate(head.received, began) >= fast_connection and waiting:  # type: ignore[operator]
                        rest = (waiting[0][0], end)  # one request, read as the consumer reads
                        waiting.clear()
                    else:
                        limit = parts_in_flight
                        launch()
                if head.done:
                    break
                wake.clear()
                await wake.wait()
            running.popleft()
            launch()
        if rest is not None:
            async with aclosing(fetch(*rest)) as chunks:
                async for chunk in chunks:
                    yield chunk
    finally:
        for part in running:
            part.task.cancel()  # type: ignore[union-attr]
        await asyncio.gather(*(part.task for part in running), return_exceptions=True)


async def parts_into(
    fetch_into: Callable[[int, memoryview], Awaitable[None]],
    start: int,
    buffer: memoryview,
    how: Parts,
) -> None:
    """Bytes [start, start + len(buffer)) into `buffer`, each part received by `fetch_into` (retried
    and resumed on its own) straight into its slice, up to `parts_in_flight` at a time. Nothing is
    held but the buffer itself, so no order is kept.

    With `fast_connection` (bytes/s), the first part is received alone and timed, as
    `ordered_parts` does: at least that fast, the rest follows as one request (bench/README.md has
    the figure from loopback SeaweedFS); otherwise the other parts run at once.
    """
    part_size, parts_in_flight, fast_connection = how
    parts = split(0, len(buffer), part_size)
    if fast_connection is not None and len(parts) > 1:
        low, high = parts.pop(0)
        began = time.monotonic()
        await fetch_into(start + low, buffer[low:high])
        if rate(high - low, began) >= fast_connection:
            await fetch_into(start + high, buffer[high:])
            return
    gate = asyncio.Semaphore(parts_in_flight)

    async def receive(low: int, high: int) -> None:
        async with gate:
            await fetch_into(start + low, buffer[low:high])

    async with task_group() as group:  # the first failure cancels the other parts
        for low, high in parts:
            group.create_task(receive(low, high))
