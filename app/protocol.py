"""uvicorn's httptools protocol, with a response's head and its first body bytes in one write.

uvicorn writes a response's status line and headers to the socket as soon as the app sends
`http.response.start`, and the body in a second write: two syscalls and, on loopback or a
fast LAN, two segments for every small response (a layout, a 64 KiB Range). Profiled under
`wrk -c32` (bench/serve_remote.py), each write cost about as much as all of pt2serve's own
work for the request. `JoiningTransport` holds a small write until the next write or the end
of the event loop's turn, whichever comes first, and sends what it held and the new bytes
together (one writev(2) in uvloop). Bytes keep their order; nothing waits longer than the
loop turn in which it was written; close and write_eof send what is held first.

The protocol also offers ASGI's zero-copy send extension (`http.response.zerocopysend`, which
uvicorn lacks): a message naming a file, an offset and a count goes to the socket with
sendfile(2), after whatever the transport still holds, so the bytes never pass through user
space (uvloop has no `loop.sendfile` of its own). `pt2serve.delivered`, an extension of ours,
waits until the peer acknowledged every byte sent: a page handed to the socket by sendfile is
read again by a retransmission, so a check of the file made after this covers what went out.
`SENDFILE` counts the bytes sendfile(2) sent (the metrics show them). `PT2SERVE_ZERO_COPY=0` in the
server's environment turns the extension off (every body then goes through writes).

A request's head (request line and header fields) is bounded: httptools buffers a header field
whole before handing it over, so the bytes are counted as they arrive, and a head longer than
`PT2SERVE_MAX_HEADER_BYTES` (default 64 KiB, as h11's) is answered 431 and the connection closed
before the rest is parsed. Only the bytes of a head count: a chunk that ends a head and carries body
bytes is parsed in two feeds, the head's part first. A request (head and body) must also be in
within `REQUEST_SECONDS` of the connection's start or of the previous request's end (counted again
while an answer goes out), else the connection is closed: uvicorn arms no timer until an answer is
out and none for a body, so a client that opens connections and trickles (or never sends) their
heads or bodies would hold them, and their buffers, forever.

A connection closed while its client may still be sending the request (a 431, a 400, or a 413
answered before the body was read) closes as nginx's lingering close does: the answer is sent and
our side shut for writing, and what still comes is read and dropped (never parsed or kept) for at
most `LINGER_SECONDS` or `LINGER_BYTES`, so a client that writes its whole request before it reads
gets the answer rather than a reset.

`pt2serve serve` runs uvicorn with `http=HTTP_PROTOCOL` (uvicorn's `--http` option takes a
protocol class's import path).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import struct
import termios
from collections.abc import Callable
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from .settings import max_header_bytes_from

HTTP_PROTOCOL = "app.protocol:JoiningHttpToolsProtocol"
HELD_MAX = 16 << 10  # writes up to this size wait for a companion (a response head is ~300 B)
ZERO_COPY = "http.response.zerocopysend"  # the ASGI extension (and its message type)
DELIVERED = "pt2serve.delivered"  # ours: a message that returns once every byte sent was acknowledged
DELIVERED_POLL_MAX = 0.01  # seconds between looks at the socket's unacknowledged bytes, at most
SEND_TURN_MAX = 16 << 20  # bytes one writable callback sends at most before the loop's other work
LINGER_SECONDS = 2.0  # how long the rest of a refused request is read and dropped, at most ...
LINGER_BYTES = 64 << 20  # ... and how much of it
REQUEST_SECONDS = 30.0  # how long a connection may take to send a request, head and body (nginx: 60 s)


class JoiningTransport:
    """Wraps a transport: small writes are held for one loop turn and joined with the next."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.loop = loop
        self.held: list[bytes | bytearray | memoryview] = []
        self.lingers: Callable[[], bool] | None = None  # True: it closes by lingering instead

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.held:
            self.held.append(data)
            if len(data) > HELD_MAX:
                self.flush()
            return
        if len(data) > HELD_MAX:
            self.transport.write(data)
            return
        self.held.append(data)
        self.loop.call_soon(self.flush)

    def writelines(self, pieces: Any) -> None:
        for piece in pieces:
            self.write(piece)

    def flush(self) -> None:
        if not self.held:
            return
        held, self.held = self.held, []
        if self.transport.is_closing():
            return  # the connection is gone: as for any write to a closed transport
        self.transport.writelines(held)

    def close(self) -> None:
        if self.lingers is not None and self.lingers():
            return
        self.flush()
        self.transport.close()

    def write_eof(self) -> None:
        self.flush()
        self.transport.write_eof()

    def abort(self) -> None:
        self.held = []
        self.transport.abort()

    def get_write_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() + sum(len(piece) for piece in self.held)

    def __getattr__(self, name: str) -> Any:  # is_closing, get_extra_info, set_protocol, ...
        return getattr(self.transport, name)


class SendfileStats:
    """What sendfile(2) sent in this process: calls and bytes."""

    def __init__(self) -> None:
        self.calls = 0
        self.bytes = 0


SENDFILE = SendfileStats()


class ZeroCopyCycle(RequestResponseCycle):
    """uvicorn's request/response cycle, with the zero-copy send and `pt2serve.delivered`."""

    async def send(self, message: Any) -> None:
        kind = message["type"]
        if kind == ZERO_COPY and self.response_started and not self.response_complete:
            await self._send_file(message)
        elif kind == DELIVERED:
            if not self.disconnected:
                await _delivered(self.transport)
        else:
            await super().send(message)

    async def _send_file(self, message: Any) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        fd = message["file"].fileno()
        offset = message.get("offset")
        count = message.get("count")
        from_position = offset is None
        if from_position:
            offset = os.lseek(fd, 0, os.SEEK_CUR)
        if count is None:
            count = os.fstat(fd).st_size - offset
        more_body = message.get("more_body", False)
        if self.scope["method"] == "HEAD":
            count = 0
        elif not self.chunked_encoding and count > self.expected_content_length:
            raise RuntimeError("Response content longer than Content-Length")
        if count:
            if self.chunked_encoding:
                self.transport.write(b"%x\r\n" % count)
            try:
                await _sendfile(self.transport, fd, offset, count)
            except (BrokenPipeError, ConnectionResetError):
                self.disconnected = True  # as uvicorn's connection_lost marks it
                self.message_event.set()
                return
            if from_position:
                os.lseek(fd, offset + count, os.SEEK_SET)
            if self.chunked_encoding:
                self.transport.write(b"\r\n")
            else:
                self.expected_content_length -= count
        if not more_body:  # completes the response as an empty last body message does
            await super().send({"type": "http.response.body", "body": b"", "more_body": False})


class _FileSender:
    """Sends a file's bytes to the connection's socket from the event loop's writable callback, as
    nginx does from its event loop: each wake-up is one sendfile(2) until the socket is full, with
    no task switch in between. A duplicate of the socket's descriptor is what is watched (the event
    loop refuses a watch on a descriptor its transport owns) and what is written to."""

    def __init__(self, raw: asyncio.Transport, socket_fd: int, fd: int, offset: int, count: int) -> None:
        self.loop = asyncio.get_running_loop()
        self.raw = raw
        self.socket = os.dup(socket_fd)
        self.fd = fd
        self.offset = offset
        self.end = offset + count
        self.done: asyncio.Future[None] = self.loop.create_future()
        self.watching = False

    def start(self) -> None:
        self.send()
        if not self.done.done():
            self.loop.add_writer(self.socket, self.send)
            self.watching = True

    def send(self) -> None:
        """As much as the socket takes now (at most SEND_TURN_MAX, so other connections get turns)."""
        if self.done.done():
            return
        if self.raw.get_write_buffer_size():  # the transport's own bytes (the head) go first
            return
        budget = SEND_TURN_MAX
        try:
            while self.offset < self.end and budget > 0:
                sent = os.sendfile(self.socket, self.fd, self.offset, min(self.end - self.offset, budget))
                if sent == 0:
                    raise OSError(f"the file ended {self.end - self.offset} bytes before the count sent")
                self.offset += sent
                budget -= sent
                SENDFILE.calls += 1
                SENDFILE.bytes += sent
        except BlockingIOError:
            return
        except OSError as error:
            self.done.set_exception(error)
            return
        if self.offset >= self.end:
            self.done.set_result(None)

    def close(self) -> None:
        if self.watching:
            self.loop.remove_writer(self.socket)
            self.watching = False
        if self.socket >= 0:
            os.close(self.socket)
            self.socket = -1


def _raw(transport: Any) -> asyncio.Transport:
    """The event loop's transport under a JoiningTransport, whose held bytes are sent first."""
    if isinstance(transport, JoiningTransport):
        transport.flush()
        return transport.transport
    return transport  # type: ignore[no-any-return]


async def _sendfile(transport: Any, fd: int, offset: int, count: int) -> None:
    """`count` bytes of file `fd` from `offset` to the connection's socket, after every byte the
    transport buffered (the response head)."""
    raw = _raw(transport)
    sock = raw.get_extra_info("socket")
    if sock is None or raw.is_closing():
        raise ConnectionResetError("the connection is closed")
    sender = _FileSender(raw, sock.fileno(), fd, offset, count)
    try:
        sender.start()
        await sender.done
    finally:
        sender.close()


async def _delivered(transport: Any) -> None:
    """Return once the peer acknowledged every byte written to the connection (or it closed)."""
    raw = _raw(transport)
    sock = raw.get_extra_info("socket")
    outq = getattr(termios, "TIOCOUTQ", None)  # SIOCOUTQ: bytes not yet acknowledged (Linux)
    if sock is None or outq is None:
        return
    delay = 0.0002
    while not raw.is_closing():
        try:
            (unacknowledged,) = struct.unpack("i", fcntl.ioctl(sock.fileno(), outq, b"\0\0\0\0"))
        except OSError:
            return
        if not unacknowledged and not raw.get_write_buffer_size():
            return
        await asyncio.sleep(delay)
        delay = min(delay * 2, DELIVERED_POLL_MAX)


def header_refusal(default_headers: list[tuple[bytes, bytes]], limit: int) -> bytes:
    """The whole 431 answer: the service's JSON error, and the connection closes after it."""
    message = f"the request's head (request line and header fields) is longer than {limit} bytes"
    body = orjson.dumps({"error": {"code": "header_too_large", "message": message}})
    head = [b"HTTP/1.1 431 Request Header Fields Too Large\r\n"]
    head += [name + b": " + value + b"\r\n" for name, value in default_headers]
    head += [b"content-type: application/json\r\n", b"x-content-type-options: nosniff\r\n"]
    head += [b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)]
    return b"".join(head) + body


class JoiningHttpToolsProtocol(HttpToolsProtocol):
    # offer the zero-copy send extension (False: every body goes through writes)
    zero_copy = os.environ.get("PT2SERVE_ZERO_COPY", "1") != "0"

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = JoiningTransport(transport, self.loop)  # type: ignore[assignment]
        self.transport.lingers = self._lingers
        self.head_limit = max_header_bytes_from(os.environ)
        self.head_bytes = 0  # bytes of the current head seen so far
        self.in_head = True  # until the current message's headers are complete
        self.in_body = False  # from then until the message is complete
        self.heads_done = 0  # heads parsed on this connection
        self.dropped: int | None = None  # bytes read and dropped since the connection lingers
        self.linger_timer: asyncio.TimerHandle | None = None
        # when the request now awaited began to be awaited; one timer a connection looks at it (a
        # timer armed and cancelled for every request cost the small requests a few percent)
        self.awaited_since = self.loop.time()
        self.request_timer = self.loop.call_later(REQUEST_SECONDS, self._check_request)

    def _check_request(self) -> None:
        """Close a connection whose request has been awaited for REQUEST_SECONDS; while an answer
        still goes out, the wait counts again from now."""
        if self.dropped is not None or not (self.in_head or self.in_body):
            return
        now = self.loop.time()
        if self.cycle is not None and not self.cycle.response_complete:
            self.awaited_since = now
        waited = now - self.awaited_since
        if waited >= REQUEST_SECONDS:
            self.transport.close()
            return
        self.request_timer = self.loop.call_later(REQUEST_SECONDS - waited, self._check_request)

    def data_received(self, data: bytes) -> None:
        if self.in_head:
            room = self.head_limit - self.head_bytes
            if len(data) <= room:  # the usual request: its whole head in one read
                self.head_bytes += len(data)
                HttpToolsProtocol.data_received(self, data)
            else:
                self._long_head(data, room)
        elif self.dropped is None:
            HttpToolsProtocol.data_received(self, data)
        else:
            self.dropped += len(data)
            if self.dropped > LINGER_BYTES:
                self.transport.close()

    def _long_head(self, data: bytes, room: int) -> None:
        """More bytes than the head may still take: feed what it may take; if the head has not
        ended there, it is longer than the limit."""
        heads = self.heads_done
        self.head_bytes += room
        HttpToolsProtocol.data_received(self, data[:room])
        if self.dropped is not None:
            return  # refused by the parser (400) already
        if self.heads_done == heads:
            self._refuse_head()
        else:  # (a pipelined request's head begun in those bytes is counted from here on)
            self.data_received(data[room:])

    def _refuse_head(self) -> None:
        """431 and close; if a response to an earlier (pipelined) request is going out, close now."""
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(header_refusal(self.server_state.default_headers, self.head_limit))
        else:
            self.dropped = 0  # no lingering: the other response may still write
        self.transport.close()

    def _lingers(self) -> bool:
        """Instead of closing now, linger (see the module docstring) if the client may still be
        sending this request; False: close now (nothing unread, or lingering already)."""
        if self.dropped is not None or not (self.in_body or (self.in_head and self.head_bytes)):
            return False
        if not self.transport.can_write_eof():  # TLS: no half close
            return False
        self.dropped, self.in_head = 0, False  # from here every byte is dropped
        self.transport.write_eof()  # the answer, then our FIN
        with contextlib.suppress(RuntimeError, AttributeError):
            self.transport.transport.resume_reading()  # flow control may have paused it
        self.linger_timer = self.loop.call_later(LINGER_SECONDS, self.transport.close)
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self.linger_timer is not None:
            self.linger_timer.cancel()
        self.request_timer.cancel()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.zero_copy:
            self.scope["extensions"] = {ZERO_COPY: {}, DELIVERED: {}}  # type: ignore[typeddict-unknown-key]

    def on_headers_complete(self) -> None:
        self.in_head, self.in_body = False, True
        self.heads_done += 1
        super().on_headers_complete()
        if self.zero_copy and type(self.cycle) is RequestResponseCycle:
            self.cycle.__class__ = ZeroCopyCycle  # the cycle uvicorn just made, with our send

    def on_message_complete(self) -> None:
        self.in_head, self.in_body, self.head_bytes = True, False, 0  # next: the next request's head
        self.awaited_since = self.loop.time()
        HttpToolsProtocol.on_message_complete(self)
