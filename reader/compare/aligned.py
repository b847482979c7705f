"""Two byte streams of the same length in aligned pieces of whole elements, however each is chunked
(the streamed pass folds and hashes both tensors piece by piece)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing


async def aligned(
    chunks_a: AsyncIterator[bytes | memoryview], chunks_b: AsyncIterator[bytes | memoryview], unit: int
) -> AsyncIterator[tuple[memoryview, memoryview]]:
    """Equal-length pieces (whole elements) of two streams of the same length, however each is
    chunked: views of the chunks themselves, cut where either stream's chunk ends; only an
    element split across two chunks is copied (into a piece of its own)."""
    async with aclosing(chunks_a) as stream_a, aclosing(chunks_b) as stream_b:  # type: ignore[type-var]
        streams = (stream_a.__aiter__(), stream_b.__aiter__())
        queues: tuple[list[memoryview], list[memoryview]] = ([], [])
        ended = [False, False]
        while True:
            wanted = [i for i in (0, 1) if not ended[i] and _short(queues[i], unit)]
            got = await asyncio.gather(*(_next(streams[i]) for i in wanted))
            for i, chunk in zip(wanted, got):
                if chunk is None:
                    ended[i] = True
                elif len(chunk):
                    queues[i].append(memoryview(chunk).cast("B"))
                    _whole_front(queues[i], unit)
            if not (_short(queues[0], unit) or _short(queues[1], unit)):
                front_a, front_b = queues[0][0], queues[1][0]
                ready = min(len(front_a), len(front_b))
                ready -= ready % unit
                yield front_a[:ready], front_b[:ready]
                for queue in queues:
                    queue[0] = queue[0][ready:]
                    if not queue[0]:
                        queue.pop(0)
                    _whole_front(queue, unit)
            elif ended[0] and ended[1]:
                if queues[0] or queues[1]:
                    raise ValueError("the two tensors' byte streams differ in length")
                return
            elif (ended[0] and _short(queues[0], unit)) or (ended[1] and _short(queues[1], unit)):
                raise ValueError("the two tensors' byte streams differ in length")


def _short(queue: list[memoryview], unit: int) -> bool:
    """No whole element at the front of the queue yet."""
    return not queue or len(queue[0]) < unit


def _whole_front(queue: list[memoryview], unit: int) -> None:
    """Make the front piece hold at least one whole element, copying the few bytes of an element
    that a chunk boundary split (the front becomes that one element)."""
    while len(queue) > 1 and len(queue[0]) < unit:
        need = unit - len(queue[0])
        queue[0] = memoryview(bytes(queue[0]) + bytes(queue[1][:need]))
        queue[1] = queue[1][need:]
        if not queue[1]:
            queue.pop(1)


async def _next(stream: AsyncIterator[bytes | memoryview]) -> bytes | memoryview | None:
    try:
        return await stream.__anext__()
    except StopAsyncIteration:
        return None
