"""One response's bytes as they are received, sans-IO: where each read goes, what waits to be taken.

The socket reads into what `get_buffer` hands out and `received` says how much arrived, as an asyncio
`BufferedProtocol` does (connection.py is one, around this object). The head, and a body framed
by chunks or by the close, go through a small buffer of their own into h11 (framing.py). A counted
body (a Content-Length) is received into 1 MiB buffers, and each read is handed on as a run of the
buffer it filled: nothing is copied in Python, and a buffer is never reused (a consumer may keep a
chunk, and a transport may hold one it has not finished writing). Reads that follow one another in
a buffer the consumer has not yet taken from join one run: fewer, bigger chunks when it lags.
Given the body's final memory (`land_into`), the reads go straight there and nothing is queued.
A long body received on a thread is posted here whole buffers at a time, with their CRC-32s
(`posted`: receiver.py).

What waits for the consumer is typed: `Run` (a stretch of a receive buffer), `Parsed` (bytes h11
parsed, or a counted body's first bytes, which came with its head) and `Posted` (a receive
thread's buffer); each says its `data` and the `crcs` of its pieces, if they were taken.
"""

from __future__ import annotations

import collections
import enum
from typing import NamedTuple

import httpx

from ..base import fresh_buffer
from ..scatter import Scatter
from .framing import Data, Framing

BUFFER_SIZE = 1 << 20  # receive buffer; a read fills at most what is left of one
BUFFER_MIN_LEFT = 64 << 10  # below this much room, the next read gets a fresh buffer
HEAD_BUFFER = 64 << 10


class Run(NamedTuple):
    """Body bytes `buffer[start:end]`, received in a row into one receive buffer."""

    buffer: memoryview
    start: int
    end: int

    @property
    def data(self) -> memoryview:
        return self.buffer[self.start : self.end]

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def crcs(self) -> None:
        return None


class Parsed(NamedTuple):
    """Body bytes h11 parsed (or that came in with the head)."""

    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def crcs(self) -> None:
        return None


class Posted(NamedTuple):
    """A buffer the receive thread filled, with the CRC-32 of each of its receiver.PIECEs if it took them."""

    data: memoryview
    crcs: list[int] | None

    @property
    def size(self) -> int:
        return len(self.data)


Chunk = Run | Parsed | Posted


class Read(enum.Enum):
    """What one socket read was."""

    PARSED = "head, or a body h11 parses"
    BODY = "counted body bytes, queued"
    LANDED = "counted body bytes, in the consumer's memory"


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
        self.chunks: collections.deque[Chunk] = collections.deque()  # received, not yet taken
        self.held = 0  # bytes in `chunks`
        self.error: Exception | None = None
        self.buffer, self.filled = self.head_buffer, 0  # `filled`: bytes of `buffer` handed on
        self.sink: Scatter | None = None  # the consumer's memory the body goes into, if any
        self.landed = 0  # body bytes written into `sink`
        self.landing = False  # the last buffer handed out was the sink's

    @property
    def done(self) -> bool:
        """The whole body arrived."""
        return self.framing.done

    # -- the socket's side ------------------------------------------------------------------------

    def get_buffer(self) -> memoryview:
        """Where the next read goes."""
        framing = self.framing
        if framing.remaining is None:
            return self.buffer  # the head, or a body h11 parses: copied into h11's buffer anyway
        if self.sink is not None and framing.remaining:
            self.landing = True
            return self.sink.free()  # as long as `remaining` at most (land_into checked)
        if len(self.buffer) - self.filled < BUFFER_MIN_LEFT:
            self.buffer, self.filled = fresh_buffer(BUFFER_SIZE), 0
        return self.buffer[self.filled :]

    def received(self, nbytes: int) -> Read:
        """The last read wrote `nbytes` into what `get_buffer` handed out."""
        self.answered = True
        if self.framing.remaining is None:
            self._parse(bytes(self.buffer[:nbytes]))
            return Read.PARSED
        if self.landing:
            self.landing = False
            nbytes = self.framing.count(nbytes)  # all of them: the sink's free room is no longer
            self.sink.advance(nbytes)  # type: ignore[union-attr]
            self.landed += nbytes
            return Read.LANDED
        start, self.filled = self.filled, self.filled + nbytes
        self._run(self.buffer, start, self.filled)
        return Read.BODY

    def posted(self, data: memoryview, crcs: list[int] | None, trailing: bool) -> None:
        """The receive thread's next buffer of the body (exactly the body's bytes); `trailing`: more
        came after the body's end, so the connection is not reused."""
        self.answered = True
        self.framing.count(len(data))
        if self.framing.done and trailing:
            self.framing.reusable = False
        self.chunks.append(Posted(data, crcs))
        self.held += len(data)

    def lost(self) -> None:
        """The server closed the connection (or it broke): a body read until the close ends here."""
        self.framing.reusable = False
        if self.error is None:
            try:
                self._queue(self.framing.closed())
            except httpx.RemoteProtocolError as exc:
                self.error = exc

    def _parse(self, data: bytes) -> None:
        framing = self.framing
        try:
            events = framing.feed(data)
        except httpx.RemoteProtocolError as exc:
            self.error = exc
            return
        if framing.remaining is None:
            self._queue(events)
            return
        for event in events:  # a counted body's head: its first bytes came with it
            if isinstance(event, Data):
                self._run(memoryview(event.data), 0, len(event.data))
        if not framing.done:
            self.buffer, self.filled = fresh_buffer(BUFFER_SIZE), 0

    def _run(self, buffer: memoryview, start: int, end: int) -> None:
        """Counted body bytes `buffer[start:end]` arrived (those past the body's end are dropped)."""
        nbytes = self.framing.count(end - start)
        if not nbytes:
            return
        end = start + nbytes
        chunks = self.chunks
        last = chunks[-1] if chunks else None
        if type(last) is Run and last.buffer is buffer and last.end == start:
            chunks[-1] = Run(buffer, last.start, end)  # right after the run not yet taken: one chunk
        else:
            chunks.append(Run(buffer, start, end))
        self.held += nbytes

    def _queue(self, events: list) -> None:
        for event in events:
            if isinstance(event, Data) and event.data:
                self.chunks.append(Parsed(event.data))
                self.held += len(event.data)

    # -- the consumer's side ----------------------------------------------------------------------

    def take(self) -> Chunk | None:
        """The next chunk received, or None if none is here yet."""
        if not self.chunks:
            return None
        taken = self.chunks.popleft()
        self.held -= taken.size
        return taken

    def queued(self) -> bytes:
        """The bytes received and not yet taken, in one piece (a look at what came first)."""
        return b"".join(bytes(chunk.data) for chunk in self.chunks)

    def land_into(self, sink: Scatter) -> None:
        """The rest of a counted body goes into `sink`, which must hold exactly that much (else
        ValueError); nothing may be queued."""
        remaining = self.framing.remaining
        assert remaining is not None and not self.chunks
        if sink.size - sink.filled != remaining:
            raise ValueError(f"a body of {sink.filled + remaining} bytes for {sink.size} bytes of memory")
        self.sink, self.landed = sink, 0
