"""uvicorn's httptools protocol, with a response's head and its first body bytes in one write.

uvicorn writes a response's status line and headers to the socket as soon as the app sends
`http.response.start`, and the body in a second write: two syscalls and, on loopback or a
fast LAN, two segments for every small response (a layout, a 64 KiB Range). Profiled under
`wrk -c32` (bench/serve_remote.py), each write cost about as much as all of pt2serve's own
work for the request. `JoiningTransport` holds a small write until the next write or the end
of the event loop's turn, whichever comes first, and sends what it held and the new bytes
together (one writev(2) in uvloop). Bytes keep their order; nothing waits longer than the
loop turn in which it was written; close and write_eof send what is held first.

`pt2serve serve` runs uvicorn with `http=HTTP_PROTOCOL` (uvicorn's `--http` option takes a
protocol class's import path).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HTTP_PROTOCOL = "app.protocol:JoiningHttpToolsProtocol"
HELD_MAX = 16 << 10  # writes up to this size wait for a companion (a response head is ~300 B)


class JoiningTransport:
    """Wraps a transport: small writes are held for one loop turn and joined with the next."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.loop = loop
        self.held: list[bytes | bytearray | memoryview] = []

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


class JoiningHttpToolsProtocol(HttpToolsProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = JoiningTransport(transport, self.loop)  # type: ignore[assignment]
