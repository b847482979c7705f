"""One response's bytes as they are received, sans-IO: where each read goes, what waits to be taken.

The socket reads into what `get_buffer` hands out and `received` says how much arrived, as an asyncio
`BufferedProtocol` does (connection.py is one, around this object). The head, and a body framed
by chunks or by the close, go through a small buffer of their own into h11 (framing.py). A counted
body (a Content-Length) is received into 1 MiB buffers and handed on as the stretches of them the
reads filled: nothing is copied in Python, and a buffer is never reused (a consumer may keep a
chunk, and a transport may hold one it has not finished writing). Reads into a buffer only move its
end (no object a read): all the consumer has not yet taken of the current buffer is one chunk, so
it gets fewer, bigger chunks when it lags. Given the body's final memory (`land_into`), the reads go
straight there and nothing is queued. A long body received on a thread is posted here a whole
buffer at a time, with its CRC-32s (`posted`: receiver.py).

What the consumer takes is typed: `Received` (bytes received on the loop) or `Posted` (a receive
thread's buffer, with the CRC-32 of each of its pieces if the thread took them).
"""

from __future__ import annotations

import collections
import enum
from typing import NamedTuple

import httpx

from ...base import fresh_buffer
from ..scatter import Scatter
from .framing import Data, Event, Framing

BUFFER_SIZE = 1 << 20  # receive buffer; a read fills at most what is left of one
BUFFER_MIN_LEFT = 64 << 10  # below this much room, the next read gets a fresh buffer
HEAD_BUFFER = 64 << 10


class Received(NamedTuple):
    """Body bytes received on the loop: a stretch of a receive buffer, or bytes h11 parsed."""

    data: bytes | memoryview
    crcs = None  # (not a field) none taken: the consumer checks these bytes itself


class Posted(NamedTuple):
    """A buffer the receive thread filled, with the CRC-32 of each of its receiver.PIECEs if it took them."""

    data: memoryview
    crcs: list[int] | None


Chunk = Received | Posted


class Read(enum.Enum):
    """What one socket read was."""

    PARSED = "head, or a body h11 parses"
    BODY = "counted body bytes, for the consumer to take"
    LANDED = "counted body bytes, in the consumer's memory"


# the members by module-level names: returned and compared each read at a global lookup's cost
# (an attribute of the enum class costs more than the rest of a read's bookkeeping)
PARSED, BODY, LANDED = Read.PARSED, Read.BODY, Read.LANDED


class Inbox:
    """The received side of one exchange at a time (`framing` tells where its response ends).
    `error`: what went wrong (raised to the consumer); after one, or once `framing.stopped`, the
    connection is to read nothing more."""

    def __init__(self) -> None:
        self.framing = Framing()
        self.head_buffer = memoryview(bytearray(HEAD_BUFFER))  # the head's buffer, reused
        self.idle()

    def idle(self) -> None:
        """Between exchanges: nothing received, nothing expected."""
        self.framing.idle()
        self.answered = False  # a byte of the response arrived
        self.chunks: collections.deque[Chunk] = collections.deque()  # received before the run, not yet taken
        self.held = 0  # bytes received and not yet taken (`chunks` and the run)
        self.error: Exception | None = None
        self.buffer = self.head_buffer  # the buffer the reads go into
        self.run = self.filled = 0  # its bytes [run, filled) are the body's, not yet taken
        self.sink: Scatter | None = None  # the consumer's memory the body goes into, if any
        self.landed = 0  # body bytes written into `sink`
        self.landing = False  # the last buffer handed out was the sink's

    @property
    def done(self) -> bool:
        """The whole body arrived."""
        return self.framing.done

    # -- the socket's side ------------------------------------------------------------------------

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next read goes."""
        remaining = self.framing.remaining
        if remaining is None:
            return self.buffer  # the head, or a body h11 parses: copied into h11's buffer anyway
        if self.sink is not None and remaining:
            self.landing = True
            return self.sink.free()  # as long as `remaining` at most (land_into checked)
        if len(self.buffer) - self.filled < BUFFER_MIN_LEFT:
            self._close_run()
            self.buffer, self.run, self.filled = fresh_buffer(BUFFER_SIZE), 0, 0
        return self.buffer[self.filled :]

    def received(self, nbytes: int) -> Read:
        """The last read wrote `nbytes` into what `get_buffer` handed out."""
        self.answered = True
        if self.framing.remaining is None:
            self._parse(bytes(self.buffer[:nbytes]))
            return PARSED
        nbytes = self.framing.count(nbytes)  # bytes past the body's end are dropped
        if self.landing:
            self.landing = False
            self.sink.advance(nbytes)  # type: ignore[union-attr]
            self.landed += nbytes
            return LANDED
        self.filled += nbytes
        self.held += nbytes
        return BODY

    def posted(self, data: memoryview, crcs: list[int] | None, trailing: bool) -> None:
        """The receive thread's next buffer of the body (exactly the body's bytes); `trailing`: more
        came after the body's end, so the connection is not reused."""
        self.answered = True
        self.framing.count(len(data))
        if self.framing.done and trailing:
            self.framing.reusable = False
        self._close_run()
        self.chunks.append(Posted(data, crcs))
        self.held += len(data)

    def lost(self) -> None:
        """The server closed the connection (or it broke): a body read until the close ends here."""
        self.framing.reusable = False
        if self.error is None:
            try:
                self._queue(self.framing.closed())
            except httpx.RemoteProtocolError as exc:
                self.error = _kept(exc)

    def _parse(self, data: bytes) -> None:
        try:
            events = self.framing.feed(data)
        except httpx.RemoteProtocolError as exc:
            self.error = _kept(exc)
            return
        self._queue(events)
        if self.framing.remaining:  # a counted body starts: its own buffers
            self.buffer, self.run, self.filled = fresh_buffer(BUFFER_SIZE), 0, 0

    def _queue(self, events: list[Event]) -> None:
        framing = self.framing
        for event in events:
            if isinstance(event, Data) and event.data:
                data = event.data
                if framing.remaining is not None:  # a counted body's first bytes, with its head:
                    data = memoryview(data)[: framing.count(len(data))]  # counted, a view as any read
                if data:
                    self.chunks.append(Received(data))
                    self.held += len(data)

    def _close_run(self) -> None:
        """What the consumer has not taken of the current buffer goes into the queue (the reads
        move on to another buffer, or something else follows them)."""
        if self.filled > self.run:
            self.chunks.append(Received(self.buffer[self.run : self.filled]))
            self.run = self.filled

    # -- the consumer's side ----------------------------------------------------------------------

    def take(self) -> Chunk | None:
        """The next chunk received, or None if none is here yet."""
        if self.chunks:
            taken = self.chunks.popleft()
        elif self.filled > self.run:
            taken = Received(self.buffer[self.run : self.filled])
            self.run = self.filled
        else:
            return None
        self.held -= len(taken.data)
        return taken

    def queued(self) -> bytes:
        """The bytes received and not yet taken, in one piece (a look at what came first)."""
        queued = [bytes(chunk.data) for chunk in self.chunks]
        return b"".join([*queued, bytes(self.buffer[self.run : self.filled])])

    def land_into(self, sink: Scatter) -> None:
        """The rest of a counted body goes into `sink`, which must hold exactly that much (else
        ValueError); nothing may wait to be taken."""
        remaining = self.framing.remaining
        assert remaining is not None and not self.held
        if sink.size - sink.filled != remaining:
            raise ValueError(f"a body of {sink.filled + remaining} bytes for {sink.size} bytes of memory")
        self.sink, self.landed = sink, 0


def _kept(error: Exception) -> Exception:
    """An error kept to be raised to the consumer later, without the traceback of where it was
    caught: those frames reach back through the event loop to whoever runs it (a synchronous
    `reader.load` and the arrays it returns), and a kept error would hold them all until the
    cyclic garbage collector ran (a whole model's memory, past the load). The same of the error it
    was raised while handling."""
    error.__context__ = None
    return error.with_traceback(None)
