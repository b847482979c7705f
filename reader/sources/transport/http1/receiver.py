"""The rest of a Content-Length body received on a thread of its own (plain TCP connections).

On the event loop every socket read of a body is a trip through the loop and its callbacks, and a
CRC-32 taken later on another thread reads bytes that have left the receiving core's cache. A
thread that reads the socket in a loop (the GIL released in each read) and takes each full buffer's
CRC-32 right after it fills beats the least an asyncio client of `ar.stream`'s shape can do, and the
same thread with the CRC-32 left to the consumer (bench/README.md).
So `Connection` pauses its transport once the head is parsed and hands the socket's
remaining body bytes to a `Receiver`: exactly that many bytes are read (a byte past the body stays
in the kernel, and the pool's check catches it), each full buffer is posted to the loop with the
CRC-32 of each `PIECE` of it (taken right after it filled, while its bytes are in this core's
cache; the body stream reports them to whoever checks the bytes: `ByteSource.stream(checked=)`),
and at most `READ_AHEAD` bytes wait for the consumer. Bytes that wait
`HAND_ON` for more are handed on as they are, so a slow or stalled body reaches its consumer as it
comes (checked by the consumer: a part-filled buffer has no CRC-32s).

The thread reads a duplicate of the connection's descriptor, blocking (one system call a read):
closing it never closes the connection, and `stop()` shuts the connection down so a blocked read
returns at once. Timeouts
stay with the consumer's waits (connection.py), as on the loop. TLS connections are not handed over:
their state lives in asyncio's SSL protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import threading
from collections.abc import Callable

import httpx
import numpy as np

from .... import zipfmt

BUFFER_SIZE = 4 << 20  # each buffer filled, checked and posted whole (1 MiB buffers cost more CPU)
PIECE = 1 << 20  # a CRC-32 is taken of each piece of a full buffer
READ_AHEAD = 8 << 20  # received and not yet taken before the thread waits
# bytes that waited this long for more are handed on (as connection.py's WAKE_DELAY on the loop: a slow
# or stalled body still reaches its consumer as it comes, and the service its first chunk)
HAND_ON = 0.002
POLL = 0.5  # with nothing to hand on: how often a silent socket's thread looks whether it was stopped


class Receiver:
    """Receive `length` body bytes from the socket `fileno` on a thread; `arrived(view, crcs)` (the
    CRC-32 of each PIECE of a full buffer, or None) and then `ended(error or None)` are called on
    `loop`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fileno: int,
        length: int,
        arrived: Callable[[memoryview, list[int] | None], None],
        ended: Callable[[Exception | None], None],
    ) -> None:
        self.loop = loop
        self.left = length
        self.arrived = arrived
        self.ended = ended
        self.socket = socket.socket(fileno=os.dup(fileno))
        self.lock = threading.Condition()
        self.held = 0  # posted, not yet taken
        self.waits = 0.0  # the socket's SO_RCVTIMEO (0: none)
        self.trailing = False  # bytes (or the end) came past the body: the connection is not reused
        self.stopped = False

    def start(self) -> None:
        # blocking while the thread owns the connection (the paused transport neither reads nor
        # writes): one system call per read, where a non-blocking read needs a poll before it
        self.socket.setblocking(True)
        threading.Thread(target=self._run, name="pt2serve-receive", daemon=True).start()

    def taken(self, nbytes: int) -> None:
        """The consumer took `nbytes` of what was posted (called on the loop)."""
        with self.lock:
            self.held -= nbytes
            self.lock.notify()

    def stop(self) -> None:
        """No more reads: a blocked read returns, the thread ends (called on the loop)."""
        with self.lock:
            if self.stopped:
                return
            self.stopped = True
            self.lock.notify()
            if self.socket.fileno() >= 0:
                with contextlib.suppress(OSError):  # an abortive close (RST), as transport.abort()
                    self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.socket.shutdown(socket.SHUT_RDWR)

    def _run(self) -> None:
        error: Exception | None = None
        try:
            while self.left and self._room():
                self._fill(np.empty(min(BUFFER_SIZE, self.left), dtype=np.uint8))
        except Exception as exc:
            error = exc
        finally:
            with self.lock:
                self.stopped = True
                self._give_back()
                self.socket.close()
        self._post(self.ended, error)

    def _room(self) -> bool:
        """Wait until the consumer has room for another buffer; False once stopped."""
        with self.lock:
            while self.held >= READ_AHEAD and not self.stopped:
                self.lock.wait()
            return not self.stopped

    def _fill(self, buffer: np.ndarray) -> None:
        """Fill `buffer` and hand it on with its CRC-32s; a wire slower than HAND_ON hands on what
        arrived meanwhile (without CRC-32s: the consumer checks those bytes itself)."""
        view = memoryview(buffer)
        got = posted = 0
        try:
            while got < len(view):
                self._wait_at_most(HAND_ON if got > posted else POLL)
                try:
                    nbytes = self.socket.recv_into(view[got:])
                except BlockingIOError:  # the wait passed with nothing new
                    if self.stopped:
                        raise httpx.ReadError("body read stopped") from None
                    if got > posted:
                        self._hand(view[posted:got])
                        posted = got
                    continue
                if not nbytes:
                    if self.stopped:
                        raise httpx.ReadError("body read stopped")
                    raise httpx.RemoteProtocolError("server closed the connection before the end of the body")
                got += nbytes
        except OSError as exc:
            if got > posted:
                self._hand(view[posted:got])  # what did arrive counts (a resumed read starts after it)
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}") from exc
        except httpx.TransportError:
            if got > posted:
                self._hand(view[posted:got])
            raise
        crcs = None
        if not posted:  # the whole buffer in one piece: its CRC-32s now, while it is in this cache
            crcs = [zipfmt.crc32(view[at : at + PIECE]) for at in range(0, len(view), PIECE)]
        self._hand(view[posted:], crcs)

    def _wait_at_most(self, seconds: float) -> None:
        """A blocking read returns empty-handed (EAGAIN) after `seconds` (SO_RCVTIMEO)."""
        if seconds != self.waits:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(seconds))
            self.waits = seconds

    def _hand(self, view: memoryview, crcs: list[int] | None = None) -> None:
        with self.lock:
            self.held += len(view)
        self.left -= len(view)
        if not self.left:  # the body's end: the connection may be reused once this is taken
            self._give_back()
            self.trailing = self._more_queued()
        self._post(self.arrived, view, crcs)

    def _more_queued(self) -> bool:
        """Whether the server sent anything past the body (or closed) by now: such a connection is
        not reused. (On the loop the same bytes usually come in the body's last read.)"""
        try:
            self.socket.recv(1, socket.MSG_PEEK)  # a byte, or b"" at the end of the stream
            return True
        except BlockingIOError:
            return False
        except OSError:
            return True

    def _give_back(self) -> None:
        """The connection non-blocking again, as its transport expects it."""
        with contextlib.suppress(OSError):  # already shut (stopped): the connection is not reused
            self.socket.setblocking(False)
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(0))

    def _post(self, callback: Callable, *values: object) -> None:
        try:
            self.loop.call_soon_threadsafe(callback, *values)
        except RuntimeError:  # the loop is closed: nobody is waiting
            self.stopped = True


def _timeval(seconds: float) -> bytes:
    return struct.pack("ll", int(seconds), int(seconds % 1 * 1_000_000))
