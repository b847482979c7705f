"""Where one HTTP/1.1 response starts and ends, sans-IO: no socket, no event loop, only bytes in.

h11 writes each request and parses each response head. The body of a response whose length is
known (a Content-Length, or none at all: HEAD, 204, 304) then bypasses h11, whose parser copies
every byte into a buffer of its own: the caller receives those bytes wherever it likes and only
says how many arrived (`count`), and this object says how many of them are the body's. A body
framed any other way (chunked, or read until the close) is parsed by h11 to its end (`feed`), and
its connection is not reused. One h11 connection per exchange: after a counted body h11 never saw
the end of, it could not take the next one.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import h11
import httpx

# a response to these has no body, whatever its Content-Length says (RFC 9110 6.4.1)
BODYLESS_STATUS = (204, 304)


class Head(NamedTuple):
    """The response's head arrived."""

    response: h11.Response


class Data(NamedTuple):
    """Body bytes: parsed by h11, or a counted body's first bytes, which came in with its head."""

    data: bytes


class End(NamedTuple):
    """The body ended."""


Event = Head | Data | End


class Framing:
    """The state of one exchange at a time: `request` starts it, `feed` and `count` take the
    response's bytes, `closed` the end of the stream. Errors are httpx's `RemoteProtocolError`, raised;
    after one, or once `stopped`, no byte of this connection is to be read again."""

    def __init__(self) -> None:
        self.idle()

    def idle(self) -> None:
        """Between exchanges: no response expected."""
        self._h11: h11.Connection | None = None
        self.method = b""  # the request's: a HEAD's answer has no body
        self.head: h11.Response | None = None
        self.remaining: int | None = None  # body bytes still to come, when they are counted
        self.done = False  # the whole body arrived
        self.reusable = False  # ... exactly, and the server keeps the connection open
        self.stopped = False  # read no more: bytes past the body, or an end that closes the connection

    @property
    def expecting(self) -> bool:
        """A request was written, and its exchange not yet ended (`idle`)."""
        return self._h11 is not None

    def request(
        self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], content: bytes = b""
    ) -> bytes:
        """Start an exchange: the bytes of the request (h11.LocalProtocolError for one h11 will not
        write, or while another exchange is under way: requests are never pipelined)."""
        if self._h11 is not None:
            raise h11.LocalProtocolError("a response is still expected: one exchange at a time")
        connection = h11.Connection(h11.CLIENT)
        data = connection.send(h11.Request(method=method, target=target, headers=headers))
        if content:
            data += connection.send(h11.Data(data=content))
        data += connection.send(h11.EndOfMessage())
        self._h11, self.method = connection, method  # a request h11 refused leaves this idle
        return data

    def feed(self, data: bytes) -> list[Event]:
        """Bytes of the head, or of a body h11 parses (b"": the server closed the connection); what
        they completed. A counted body's bytes that came with the head are `Data`, not yet counted."""
        connection = self._h11
        if connection is None:
            self.stopped = True
            raise httpx.RemoteProtocolError("server sent bytes between responses")
        events: list[Event] = []
        try:
            connection.receive_data(data)
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA or event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                    return events
                if isinstance(event, h11.Response):
                    self.head = event
                    events.append(Head(event))
                    if self._counted(event):  # from here on, the body bypasses h11
                        trailing, _ = connection.trailing_data
                        if trailing:
                            events.append(Data(trailing))
                        return events
                elif isinstance(event, h11.Data):
                    events.append(Data(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    self.done = self.stopped = True  # not kept: only counted bodies are
                    events.append(End())
                    return events
        except h11.RemoteProtocolError as exc:
            self.stopped = True
            raise httpx.RemoteProtocolError(str(exc)) from None

    @property
    def counting(self) -> bool:
        """The head arrived and the body's bytes are counted, not parsed."""
        return self.remaining is not None

    def count(self, nbytes: int) -> int:
        """`nbytes` of a counted body arrived: how many of them are the body's. Any past its end
        are cut off and the connection stops (`stopped`)."""
        remaining = self.remaining
        assert remaining is not None
        if nbytes >= remaining:
            if nbytes > remaining:  # a server sending more: cut off, connection dropped
                nbytes = remaining
                self.stopped = True
                self.reusable = False
            self.done = True
        self.remaining = remaining - nbytes
        return nbytes

    def closed(self) -> list[Event]:
        """The server closed the connection: a body read until the close ends here; anything else
        that was still to come is an error."""
        self.reusable = False
        events: list[Event] = []
        if self.done:
            return events
        if self.head is not None and self.remaining is None:
            with contextlib.suppress(httpx.RemoteProtocolError):  # said below, as any cut body
                events = self.feed(b"")
        if not self.done:
            received = "" if self.head is None else " before the end of the body"
            raise httpx.RemoteProtocolError(f"server closed the connection{received}")
        return events

    def _counted(self, head: h11.Response) -> bool:
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
