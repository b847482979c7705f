"""One HTTP/1.1 connection: a request written and its response received, the body into buffers.

h11 (sans-IO) writes the request and parses the response head. A Content-Length body then
bypasses h11: an asyncio `BufferedProtocol` receives it into 1 MiB buffers, and each socket read is
handed on as a memoryview of the buffer it filled. Nothing is copied in Python, and a buffer is
never reused (a consumer may keep a chunk, and a transport may hold one it has not finished
writing). Under uvloop a stream client that copies each read into a `bytes` and parses it again
(aiohttp) spent a sizeable share of the service's CPU relaying a remote tensor on those copies, and
its 256 KiB reads set the size of every write to the client: a relay receiving into 1 MiB buffers is
faster (bench/README.md, `serve_remote.py`). A body
without a Content-Length (chunked, or read until close) is parsed by h11 and its connection is
closed afterwards.

A consumer that has the body's final memory gets no chunks at all: its buffers (`sink`) are handed
to the socket reads (`get_buffer`), so the body lands where it is kept (stream.py's `receive_into`).

A read of a body waits until up to `GATHER` bytes of it are queued in the kernel (`SO_RCVLOWAT`,
which Linux honours in epoll and grows the receive buffer for), so a fast body costs one trip
through the event loop per MiB instead of one per ~170 KiB; a body that arrives slower than that is
read as it comes (`GATHER_WAIT` without a read lowers the mark to a byte). A long streamed body is
received on a thread of its own instead (receiver.py: `hand_over`).

Errors are httpx's types (`httpx.ReadError`, `RemoteProtocolError`, `ReadTimeout`, ...), so the
retry logic above does not depend on how the bytes were received.
"""

from __future__ import annotations

import asyncio
import collections
import socket

import h11
import httpx

from ..base import fresh_buffer
from ..proxies import Proxy
from ..scatter import Scatter
from .receiver import Receiver

BUFFER_SIZE = 1 << 20  # receive buffer; a read fills at most what is left of one
BUFFER_MIN_LEFT = 64 << 10  # below this much room, the next read gets a fresh buffer
# received but not yet consumed, per connection, before the socket stops being read (64 KiB, as
# aiohttp's default, throttled bulk reads)
READ_AHEAD = 4 << 20
HEAD_BUFFER = 64 << 10
# A waiting consumer is woken once WAKE_AT bytes wait for it, or WAKE_DELAY seconds after the first
# of fewer arrived: a server that sends ~120 KiB per socket read (SeaweedFS) would otherwise wake
# it ~10,000 times a second, each wake a trip through every layer up to `ar.stream`.
WAKE_AT = 256 << 10
WAKE_DELAY = 0.001
# A body received into the caller's memory (`BodyStream.receive_into`) wakes its consumer when it
# ends, and at most this often meanwhile (its progress, and the read timeout's clock)
SINK_WAKE_DELAY = 0.02
# A socket read of a body waits for GATHER bytes of it (or what is left): at the ~170 KiB a read
# found queued otherwise, `ar.stream` from loopback nginx made thousands of trips through the event
# loop per 512 MiB and ran out of CPU before nginx did (profiled). Checked every GATHER_WAIT: a body
# with no read in that time is read as it comes.
GATHER = 1 << 20
GATHER_WAIT = 0.002

# A streamed body with at least this much still to come is received on a thread (receiver.py)
THREAD_MIN = 8 << 20
# a response to these has no body, whatever its Content-Length says (RFC 9110 6.4.1)
BODYLESS_STATUS = (204, 304)


class Connection(asyncio.BufferedProtocol):
    """One request and its response on one connection: the head through h11, then the body."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.socket: socket.socket | None = None  # for the read mark's options (None: not offered)
        self.closed = False  # the connection is gone
        self.tunnelled = False  # a proxy's CONNECT tunnel carries it: requests in origin form
        self.head_buffer = memoryview(bytearray(HEAD_BUFFER))  # the head's buffer, reused
        self.waiter: asyncio.Future[None] | None = None
        self.wake_timer: asyncio.TimerHandle | None = None
        self.paused = False
        self.gather = GATHER  # 0 where the socket option is refused
        self.lowat = 1  # the socket's SO_RCVLOWAT
        self.ceiling = 1  # the highest mark the receive buffer allows (_measure)
        self.gather_timer: asyncio.TimerHandle | None = None
        self.read_lately = False  # a body read since the last check
        self.receiver: Receiver | None = None  # the thread receiving the rest of the body, if any
        self.idle()

    def idle(self) -> None:
        """Between exchanges: no response expected; any byte from the server ends the connection."""
        self.h11: h11.Connection | None = None
        self.method = b""  # the request's: a HEAD's answer has no body
        self.head: h11.Response | None = None
        self.answered = False  # a byte of the response arrived
        self.remaining: int | None = None  # body bytes still to come, when the length is known
        # received, not yet taken: bytes (a head's tail, an h11-parsed body), [buffer, start, end]
        # runs (a run grows while the consumer lags: fewer, bigger chunks when it is behind), or
        # (view, crcs) from the receive thread
        self.chunks: collections.deque[bytes | bytearray | list | tuple] = collections.deque()
        self.held = 0  # bytes in `chunks`
        self.done = False  # the whole body arrived
        self.reusable = False  # ... exactly, and the server keeps the connection open
        self.error: Exception | None = None
        self.buffer, self.filled = self.head_buffer, 0  # `filled`: bytes of `buffer` handed on
        self.sink: Scatter | None = None  # the consumer's memory the body goes into, if any
        self.sunk = 0  # body bytes written into `sink`
        self.sinking = False  # the last buffer handed to the transport was the sink's
        self.receiver = None
        self._stop_gathering()
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    @property
    def usable(self) -> bool:
        """Idle, open, and nothing went wrong while it waited."""
        transport = self.transport
        return not self.closed and self.error is None and transport is not None and not transport.is_closing()

    # -- the request and the head --------------------------------------------------------------

    def send_request(self, request: httpx.Request, content: bytes = b"", proxy: Proxy | None = None) -> None:
        """Write `request` with its body `content` (httpx framed it: Content-Length, or chunks)."""
        url = request.url
        target = url.raw_path  # as httpx built it (and SigV4 signed it)
        headers = list(request.headers.raw)
        if proxy is not None and url.scheme == "http" and not self.tunnelled:  # to the proxy: absolute form
            target = b"%s://%s%s" % (url.raw_scheme, url.netloc, target)
            headers += [(name.encode(), value.encode()) for name, value in proxy.headers.items()]
        self._send_head(request.method.encode(), target, headers, content)

    def _send_head(
        self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], content: bytes = b""
    ) -> None:
        assert self.transport is not None
        self.h11 = h11.Connection(h11.CLIENT)  # one per exchange: its body bypasses h11
        self.method = method
        data = self.h11.send(h11.Request(method=method, target=target, headers=headers))
        if content:
            data += self.h11.send(h11.Data(data=content))
        self.transport.write(data + self.h11.send(h11.EndOfMessage()))

    async def tunnel(self, host: str, port: int, proxy: Proxy) -> None:
        """Ask the proxy for a tunnel to host:port (CONNECT); then the connection is the origin's."""
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        headers = [(b"Host", authority.encode())]
        headers += [(name.encode(), value.encode()) for name, value in proxy.headers.items()]
        self._send_head(b"CONNECT", authority.encode(), headers)
        head = await self.wait_head(None)  # within the connect timeout (Pool._connect)
        if not 200 <= head.status_code < 300:
            raise httpx.ProxyError(f"CONNECT answered {head.status_code} {head.reason.decode('latin-1')}")
        self.tunnelled = True
        self.idle()

    async def wait_head(self, timeout: float | None) -> h11.Response:
        while self.head is None:
            await self.wait(timeout)
        return self.head

    # -- asyncio.BufferedProtocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.socket = transport.get_extra_info("socket")

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.head is None or self.remaining is None:
            return self.buffer  # the head, or a body h11 parses: copied into h11's buffer anyway
        if self.sink is not None and self.remaining:
            self.sinking = True
            return self.sink.free()  # as long as `remaining` at most (receive_into checked)
        if len(self.buffer) - self.filled < BUFFER_MIN_LEFT:
            self.buffer, self.filled = _fresh(), 0
        return self.buffer[self.filled :]

    def buffer_updated(self, nbytes: int) -> None:
        self.answered = True
        if self.h11 is None:  # idle: a server speaking out of turn
            self.error = httpx.RemoteProtocolError("server sent bytes between responses")
            self._stop()
        elif self.head is None or self.remaining is None:
            self._parse(bytes(self.buffer[:nbytes]))
        elif self.sinking:
            self.sinking = False
            self._sunk(nbytes)
            return
        else:
            start, self.filled = self.filled, self.filled + nbytes
            self._body(self.buffer, start, self.filled)
            self.read_lately = True
            self._gather()
            if self.held < WAKE_AT and not self.done:  # a little of the body: let more join it
                if self.wake_timer is None and self.waiter is not None:
                    self.wake_timer = self.loop.call_later(WAKE_DELAY, self._wake)
                return
        self._wake()

    def _sunk(self, nbytes: int) -> None:
        """Body bytes landed in the sink (never more than `remaining`: get_buffer's slice)."""
        assert self.remaining is not None and self.sink is not None
        self.sink.advance(nbytes)
        self.sunk += nbytes
        self.remaining -= nbytes
        self.done = self.remaining == 0
        self.read_lately = True
        self._gather()
        if self.done:
            self._wake()
        elif self.wake_timer is None and self.waiter is not None:
            self.wake_timer = self.loop.call_later(SINK_WAKE_DELAY, self._wake)

    def eof_received(self) -> bool:
        self.connection_lost(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        if self.gather_timer is not None:
            self.gather_timer.cancel()
            self.gather_timer = None
        if not self.done and self.error is None:
            if self.remaining is None and self.head is not None:
                self._parse(b"")  # a body read until close ends here
            if not self.done:
                received = "" if self.head is None else " before the end of the body"
                self.error = httpx.RemoteProtocolError(f"server closed the connection{received}")
        self._wake()

    # -- parsing ----------------------------------------------------------------------------------

    def _parse(self, data: bytes) -> None:
        """Feed h11 (the head; or a body without a Content-Length, to its end)."""
        assert self.h11 is not None
        try:
            self.h11.receive_data(data)
            while True:
                event = self.h11.next_event()
                if event is h11.NEED_DATA or event is h11.PAUSED:
                    return
                if isinstance(event, h11.Response):
                    self.head = event
                    if self._raw_body(event):  # from here on, the body bypasses h11
                        trailing, _ = self.h11.trailing_data
                        if trailing:
                            self._body(memoryview(trailing), 0, len(trailing))
                        if not self.done:
                            self.buffer, self.filled = _fresh(), 0
                            self._gather()
                        return
                elif isinstance(event, h11.Data):
                    self._queue(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    self.done = True
                    self._stop()  # not kept: only Content-Length bodies are
                    return
                elif isinstance(event, h11.ConnectionClosed):
                    return
        except h11.RemoteProtocolError as exc:
            self.error = httpx.RemoteProtocolError(str(exc))
            self._stop()

    def _raw_body(self, head: h11.Response) -> bool:
        """A Content-Length body (not chunked), or none at all: its length is all there is to parse."""
        headers = dict(head.headers)
        length = headers.get(b"content-length")
        if self.method == b"HEAD" or head.status_code in BODYLESS_STATUS:
            length = b"0"
        elif length is None or b"transfer-encoding" in headers or not length.isdigit():
            return False
        self.remaining = int(length)
        connection = headers.get(b"connection", b"").lower()
        self.reusable = head.http_version == b"1.1" and b"close" not in connection
        if self.remaining == 0:
            self.done = True
        return True

    def _body(self, buffer: memoryview, start: int, end: int) -> None:
        """Body bytes `buffer[start:end]` arrived (a Content-Length body)."""
        assert self.remaining is not None
        if end - start >= self.remaining:  # the end
            if end - start > self.remaining:  # a server sending more: cut off, connection dropped
                end = start + self.remaining
                self._stop()
            self.done = True
        self.remaining -= end - start
        if end == start:
            return
        last = self.chunks[-1] if self.chunks else None
        if isinstance(last, list) and last[0] is buffer and last[2] == start:
            last[2] = end  # right after the run not yet taken: one chunk
        else:
            self.chunks.append([buffer, start, end])
        self._held(end - start)

    # -- gathering reads ---------------------------------------------------------------------------

    def _gather(self) -> None:
        """The next read of the body waits for GATHER bytes, or all that is still to come."""
        if self.gather and self.gather_timer is None and not self.done:  # a body starts: how far?
            self._measure()
            if self.gather:  # the buffer's size was readable
                self.gather_timer = self.loop.call_later(GATHER_WAIT, self._check_gathering)
        if self.done or not self.gather or self.remaining is None:
            self._stop_gathering()
            return
        self._mark(min(self.gather, self.ceiling, self.remaining))

    def _check_gathering(self) -> None:
        """Every GATHER_WAIT while a body arrives: if nothing was read meanwhile, read what is
        queued; and follow the receive buffer as TCP tunes it (one getsockopt per check, none per read)."""
        self.gather_timer = None
        if self.done or self.closed:
            return
        if not self.read_lately:
            self._mark(1)
        self.read_lately = False
        self._measure()
        self.gather_timer = self.loop.call_later(GATHER_WAIT, self._check_gathering)

    def _stop_gathering(self) -> None:
        if self.gather_timer is not None:
            self.gather_timer.cancel()
            self.gather_timer = None
        self._mark(1)

    def _measure(self) -> None:
        """The mark's ceiling: a quarter of the socket's receive buffer. A mark the buffer cannot
        hold twice over makes Linux grow the buffer and clamp the TCP window to the mark, and a
        window no larger than what the reader waits for stops the sender at every read (measured
        well below curl: bench/README.md)."""
        try:
            self.ceiling = max(1, self.socket.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 4)  # type: ignore[union-attr]
        except (OSError, AttributeError):  # refused (or no socket): read as bytes come
            self.gather = 0

    def _mark(self, size: int) -> None:
        """Set the socket's low-water mark: a read happens once `size` bytes are queued."""
        if size == self.lowat or self.closed:
            return
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, size)  # type: ignore[union-attr]
        except (OSError, AttributeError):  # refused (or no socket): read as bytes come
            self.gather = 0
            return
        self.lowat = size

    def _queue(self, chunk: bytes | bytearray) -> None:
        self.chunks.append(chunk)
        self._held(len(chunk))

    def _held(self, added: int) -> None:
        self.held += added
        if self.held >= READ_AHEAD and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    # -- the body on a thread (receiver.py) --------------------------------------------------------

    def hand_over(self) -> None:
        """Receive what is left of a long Content-Length body on a thread, over plain TCP."""
        transport = self.transport
        if (
            self.receiver is not None
            or self.remaining is None
            or self.remaining < THREAD_MIN
            or self.done
            or self.error is not None
            or self.sink is not None
            or self.closed
            or transport is None
            or transport.is_closing()
            or transport.get_extra_info("sslcontext") is not None
            or self.socket is None
        ):
            return
        self._stop_gathering()
        if not self.paused:
            self.paused = True
            transport.pause_reading()
        receiver = Receiver(self.loop, self.socket.fileno(), self.remaining, self._arrived, self._ended)
        receiver.ended = lambda error: self._ended(error, receiver)
        self.receiver = receiver
        receiver.start()

    def _arrived(self, view: memoryview, crcs: list[int] | None) -> None:
        if self.receiver is None or self.remaining is None:  # dropped meanwhile
            return
        self.answered = True
        self.remaining -= len(view)
        self.done = self.remaining == 0
        if self.done and self.receiver.trailing:
            self.reusable = False
        self.chunks.append((view, crcs))
        self.held += len(view)
        self._wake()

    def _ended(self, error: Exception | None, receiver: Receiver) -> None:
        if receiver is not self.receiver:  # this connection moved on (or was dropped)
            return
        if error is not None and not self.done and self.error is None:
            self.error = error
            self.reusable = False
        self._wake()

    # -- the consumer's side ----------------------------------------------------------------------

    def take(self) -> tuple[memoryview | bytes, list[int] | None] | None:
        """The next chunk (all that arrived in a row in one buffer) with the CRC-32 of each of its
        receiver.PIECEs if the receive thread took them, or None if no chunk is here yet."""
        if not self.chunks:
            return None
        taken = self.chunks.popleft()
        crcs = None
        if isinstance(taken, list):
            chunk = taken[0][taken[1] : taken[2]]
        elif isinstance(taken, tuple):  # posted by the receiver
            chunk, crcs = taken
        else:
            chunk = taken
        self.held -= len(chunk)
        if self.receiver is not None:  # the socket is the receiver's: the transport stays paused
            if isinstance(taken, tuple):
                self.receiver.taken(len(chunk))
        elif self.paused and self.held < READ_AHEAD // 2 and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return chunk, crcs

    async def wait(self, timeout: float | None) -> None:
        """Until more arrives (or the body ends, or fails: then raise its error). One timer per
        wait, not `asyncio.wait_for` (a wait per socket read: its extra future and callbacks were
        the largest Python cost of a stream, profiled)."""
        if self.error is not None:
            raise self.error
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

    def _stop(self) -> None:
        """No more reads: the connection is not reused."""
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    def close(self) -> None:
        """Drop the connection (an unfinished body with it)."""
        self.reusable = False
        self.sink = None  # no read writes into the consumer's memory from here on
        if self.receiver is not None:
            self.receiver.stop()
        if self.transport is None:
            return
        if self.done:
            self.transport.close()
        else:
            self.transport.abort()


def _time_out(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(httpx.ReadTimeout("timed out waiting for the server"))


def _fresh() -> memoryview:
    """A receive buffer of its own, uninitialised (the socket read fills what is handed on)."""
    return fresh_buffer(BUFFER_SIZE)
