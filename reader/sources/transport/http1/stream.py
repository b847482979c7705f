"""A response body as its connection receives it: chunks as they arrive, or landed in place.

Iterated, the body is memoryviews of the buffers each socket read filled (or, on a thread,
receiver.py's buffers, whose CRC-32s it reports to `checked`). Given the body's final memory
(`receive_into`), the socket reads write straight into it, with no buffer and no copy in between;
given several buffers (a multi-range answer: each part's head and bytes), they are filled one after
another (scatter.py). `peek` looks at a body's first bytes before saying where it goes. Read to its
end, the connection goes back to the pool; anything else drops it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence

import httpx

from ...base import Checked
from ..scatter import Scatter
from .connection import Connection
from .receiver import PIECE


class BodyStream(httpx.AsyncByteStream):
    """The body as its `Connection` receives it: memoryviews of what each socket read filled.
    Read to its end, the connection goes back to the pool (`release`); else it is dropped.
    `checked`, if set before the body is iterated, hears of each piece (by body offset) whose CRC-32 was taken
    where it was received, before the chunk holding it is handed on."""

    def __init__(
        self,
        connection: Connection,
        timeout: float | None,
        release: Callable[[], None],
        *,
        receive_thread: bool = True,
    ) -> None:
        self.connection = connection
        self.timeout = timeout
        self.release: Callable[[], None] | None = release
        self.receive_thread = receive_thread  # a long body is received on a thread (hand_over)
        self.checked: Checked | None = None
        self.position = 0  # body bytes handed on by iteration

    async def __aiter__(self) -> AsyncIterator[bytes]:  # memoryviews, in fact: bytes-like
        connection = self.connection
        if self.receive_thread:
            connection.hand_over()
        while True:
            taken = connection.take()
            if taken is not None:
                chunk, crcs = taken.data, taken.crcs
                if crcs is not None and self.checked is not None:
                    for index, crc in enumerate(crcs):
                        at = index * PIECE
                        self.checked(self.position + at, min(PIECE, len(chunk) - at), crc)
                self.position += len(chunk)
                yield chunk
            elif connection.framing.done:
                self._finish()
                return
            else:
                await connection.wait(self.timeout)

    async def receive_into(self, view: memoryview | Sequence[memoryview]) -> AsyncIterator[int]:
        """The body written straight into `view` (or into several buffers one after another: a body
        whose pieces each have a place of their own), as long as the body: the caller checked its
        Content-Length. Yields how many more bytes landed at each wake. A body without a
        Content-Length is copied in from its chunks. Its end releases the connection as `__aiter__`'s
        does; a failure raises as `__aiter__`'s does, after the bytes that did land were yielded."""
        connection = self.connection
        inbox = connection.inbox
        sink = Scatter([view] if isinstance(view, memoryview) else view)
        if connection.framing.counting:  # what came with the head first, then the sink
            while (taken := connection.take()) is not None:
                sink.write(taken.data)
            if sink.filled:
                yield sink.filled
            inbox.land_into(sink)
            reported = 0
            while True:
                if inbox.landed > reported:
                    yield inbox.landed - reported
                    reported = inbox.landed
                if inbox.done:
                    self._finish()
                    return
                try:
                    await connection.wait(self.timeout)
                except Exception:
                    if inbox.landed > reported:  # what landed before the failure counts
                        yield inbox.landed - reported
                    raise
        async for chunk in self:
            sink.write(chunk)  # a body longer than the memory: ValueError
            yield len(chunk)

    async def peek(self, size: int) -> bytes:
        """The body's first `size` bytes (all of it, if shorter), left to be received: a look at
        how it is laid out before saying where it goes. Only before anything was taken."""
        connection = self.connection
        while True:
            queued = connection.inbox.queued()
            if len(queued) >= size or connection.framing.done:
                return queued[:size]
            await connection.wait(self.timeout)

    def _finish(self) -> None:
        if self.release is not None:
            release, self.release = self.release, None
            release()

    async def aclose(self) -> None:
        if self.release is None:  # back in the pool already (or dropped)
            return
        inbox = self.connection.inbox
        if inbox.done and not inbox.held:  # all of it arrived and was taken
            self._finish()
        else:
            self.release = None
            self.connection.close()
