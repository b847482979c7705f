"""One HTTP/1.1 connection on the event loop: a request written and its response received.

What the bytes mean is sans-IO (framing.py: the request, the head, where the body ends; inbox.py:
which buffer each read goes into and what waits for the consumer). This is the asyncio side around
them: the transport's callbacks (an asyncio `BufferedProtocol`, so each read lands in the buffer
inbox.py hands out), flow control (the socket stops being read while `READ_AHEAD` bytes wait for
the consumer), the consumer's waits and their timers, the socket's read mark (readmark.py) and the
hand-over of a long plain-TCP body to a thread of its own (receiver.py: `hand_over`).

A waiting consumer is woken once `WAKE_AT` bytes wait for it, or `WAKE_DELAY` after the first of
fewer arrived: a server that sends ~120 KiB per socket read would otherwise wake it thousands of
times a second, each wake a trip through every layer up to `ar.stream`.

Errors are httpx's types (`httpx.ReadError`, `RemoteProtocolError`, `ReadTimeout`, ...), so the
retry logic above does not depend on how the bytes were received.
"""

from __future__ import annotations

import asyncio
import socket

import h11
import httpx

from ..proxies import Proxy
from .inbox import BODY, LANDED, Chunk, Inbox, Posted
from .readmark import ReadMark
from .receiver import Receiver

# received but not yet consumed, per connection, before the socket stops being read
READ_AHEAD = 4 << 20
# a waiting consumer is woken once WAKE_AT bytes wait for it, or WAKE_DELAY after the first of fewer
WAKE_AT = 256 << 10
WAKE_DELAY = 0.001
# A body received into the caller's memory (`BodyStream.receive_into`) wakes its consumer when it
# ends, and at most this often meanwhile (its progress, and the read timeout's clock)
SINK_WAKE_DELAY = 0.02
# A streamed body with at least this much still to come is received on a thread (receiver.py)
THREAD_MIN = 8 << 20


class Connection(asyncio.BufferedProtocol):
    """One exchange at a time on one connection: `send_request`, then `wait_head`, then the body
    through `take` and `wait` (stream.py) until `inbox.done`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.socket: socket.socket | None = None  # for the read mark and the thread (None: not offered)
        self.closed = False  # the connection is gone
        self.tunnelled = False  # a proxy's CONNECT tunnel carries it: requests in origin form
        self.inbox = Inbox()
        self.framing = self.inbox.framing
        self.mark = ReadMark(loop)
        self.waiter: asyncio.Future[None] | None = None
        self.wake_timer: asyncio.TimerHandle | None = None
        self.paused = False
        self.receiver: Receiver | None = None  # the thread receiving the rest of the body, if any

    def idle(self) -> None:
        """Between exchanges: no response expected; any byte from the server ends the connection."""
        self.inbox.idle()
        self.receiver = None
        self.mark.stop()
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    @property
    def usable(self) -> bool:
        """Idle, open, and nothing went wrong while it waited."""
        transport = self.transport
        open_ = not self.closed and transport is not None and not transport.is_closing()
        return open_ and self.inbox.error is None

    # -- the request and the head --------------------------------------------------------------

    def send_request(self, request: httpx.Request, content: bytes = b"", proxy: Proxy | None = None) -> None:
        """Write `request` with its body `content` (httpx framed it: Content-Length, or chunks)."""
        url = request.url
        target = url.raw_path  # as httpx built it (and SigV4 signed it)
        headers = list(request.headers.raw)
        if proxy is not None and url.scheme == "http" and not self.tunnelled:  # to the proxy: absolute form
            target = b"%s://%s%s" % (url.raw_scheme, url.netloc, target)
            headers += [(name.encode(), value.encode()) for name, value in proxy.headers.items()]
        assert self.transport is not None
        self.transport.write(self.framing.request(request.method.encode(), target, headers, content))

    async def tunnel(self, host: str, port: int, proxy: Proxy) -> None:
        """Ask the proxy for a tunnel to host:port (CONNECT); then the connection is the origin's."""
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        headers = [(b"Host", authority.encode())]
        headers += [(name.encode(), value.encode()) for name, value in proxy.headers.items()]
        assert self.transport is not None
        self.transport.write(self.framing.request(b"CONNECT", authority.encode(), headers))
        head = await self.wait_head(None)  # within the connect timeout (Pool._connect)
        if not 200 <= head.status_code < 300:
            raise httpx.ProxyError(f"CONNECT answered {head.status_code} {head.reason.decode('latin-1')}")
        self.tunnelled = True
        self.idle()

    async def wait_head(self, timeout: float | None) -> h11.Response:
        """The response's head, once it arrived."""
        while self.framing.head is None:
            await self.wait(timeout)
        return self.framing.head

    # -- asyncio.BufferedProtocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.socket = self.mark.socket = transport.get_extra_info("socket")

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.inbox.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        inbox = self.inbox
        read = inbox.received(nbytes)
        framing = self.framing
        if read is BODY:
            self.mark.read(framing.remaining)  # type: ignore[arg-type]
            if inbox.held >= READ_AHEAD:
                self._pause()
            if not framing.done:
                if inbox.held < WAKE_AT:  # a little of the body: let more join it
                    if self.wake_timer is None and self.waiter is not None:
                        self.wake_timer = self.loop.call_later(WAKE_DELAY, self._wake)
                    return
            elif framing.stopped:  # bytes past the body
                self._stop()
        elif read is LANDED:
            self.mark.read(framing.remaining)  # type: ignore[arg-type]
            if not framing.done:
                if self.wake_timer is None and self.waiter is not None:
                    self.wake_timer = self.loop.call_later(SINK_WAKE_DELAY, self._wake)
                return
        else:
            if framing.stopped or inbox.error is not None:
                self._stop()
            elif framing.remaining:  # a counted body starts
                self.mark.follow(framing.remaining)
            if inbox.held >= READ_AHEAD:
                self._pause()
        self._wake()

    def eof_received(self) -> bool:
        self.connection_lost(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.mark.lost()
        self.inbox.lost()
        self._wake()

    # -- the body on a thread (receiver.py) --------------------------------------------------------

    def hand_over(self) -> None:
        """Receive what is left of a long counted body on a thread, over plain TCP."""
        transport, remaining = self.transport, self.framing.remaining
        if (
            self.receiver is not None
            or remaining is None
            or remaining < THREAD_MIN
            or self.inbox.error is not None
            or self.inbox.sink is not None
            or self.closed
            or transport is None
            or transport.is_closing()
            or transport.get_extra_info("sslcontext") is not None
            or self.socket is None
        ):
            return
        self.mark.stop()
        self._pause()
        receiver = Receiver(self.loop, self.socket.fileno(), remaining, self._arrived, self._ended)
        receiver.ended = lambda error: self._ended(error, receiver)
        self.receiver = receiver
        receiver.start()

    def _arrived(self, view: memoryview, crcs: list[int] | None) -> None:
        if self.receiver is None or self.framing.remaining is None:  # dropped meanwhile
            return
        self.inbox.posted(view, crcs, self.receiver.trailing)
        self._wake()

    def _ended(self, error: Exception | None, receiver: Receiver) -> None:
        if receiver is not self.receiver:  # this connection moved on (or was dropped)
            return
        if error is not None and not self.framing.done and self.inbox.error is None:
            self.inbox.error = error
            self.framing.reusable = False
        self._wake()

    # -- the consumer's side ----------------------------------------------------------------------

    def take(self) -> Chunk | None:
        """The next chunk (all that arrived in a row in one buffer, or a receive thread's buffer
        with its CRC-32s), or None if no chunk is here yet."""
        inbox = self.inbox
        if not inbox.held:  # nothing here (the consumer's every other call)
            return None
        taken = inbox.take()
        assert taken is not None
        if self.receiver is not None:  # the socket is the receiver's: the transport stays paused
            if type(taken) is Posted:
                self.receiver.taken(len(taken.data))
        elif self.paused and inbox.held < READ_AHEAD // 2 and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return taken

    async def wait(self, timeout: float | None) -> None:
        """Until more arrives (or the body ends, or fails: then raise its error). One timer per
        wait, not `asyncio.wait_for` (a wait per socket read: its extra future and callbacks were
        the largest Python cost of a stream, profiled)."""
        if self.inbox.error is not None:
            raise self.inbox.error
        waiter = self.waiter = self.loop.create_future()
        timer = None if timeout is None else self.loop.call_later(timeout, _time_out, waiter)
        try:
            await waiter
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()

    def _wake(self) -> None:
        if self.wake_timer is not None:
            self.wake_timer.cancel()
            self.wake_timer = None
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _pause(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def _stop(self) -> None:
        """No more reads: the connection is not reused."""
        self.framing.reusable = False
        if self.transport is not None:
            self.transport.close()

    def close(self) -> None:
        """Drop the connection (an unfinished body with it)."""
        self.framing.reusable = False
        self.inbox.sink = None  # no read writes into the consumer's memory from here on
        if self.receiver is not None:
            self.receiver.stop()
        if self.transport is None:
            return
        if self.framing.done:
            self.transport.close()
        else:
            self.transport.abort()


def _time_out(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(httpx.ReadTimeout("timed out waiting for the server"))
