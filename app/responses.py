"""An ASGI response for Body objects: Range, conditional requests, HEAD, multipart/byteranges.

Bytes are streamed chunk by chunk (bounded memory). A client that disconnects
cancels the upstream read at once. If the upstream fails after the headers
went out, the exception propagates and the server aborts the connection, so
the client sees a short body, never a completed response with wrong bytes.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing

import anyio
import anyio.lowlevel
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .bodies import Body, Chunk
from .errors import error_response
from .httpranges import content_range, decide
from .limits import StreamLimiter

STREAM_CHUNK = 1 << 20


class BodyResponse(Response):
    """Answer a GET/HEAD for `body` with the status its headers call for.

    A Response subclass only so frameworks pass it through; it builds and sends
    its own headers and body in __call__.
    """

    def __init__(
        self,
        request: Request,
        body: Body,
        *,
        etag: str,
        media_type: str,
        headers: Mapping[str, str] | None = None,
        chunk_size: int = STREAM_CHUNK,
        limiter: StreamLimiter | None = None,
    ) -> None:
        self.limiter = limiter
        self.background = None
        self.body = body
        self.etag = etag
        self.media_type = media_type
        self.extra = dict(headers or {})
        self.chunk_size = chunk_size
        self.head = request.method == "HEAD"
        self.decision = decide(
            body.length,
            etag,
            range_header=request.headers.get("range"),
            if_none_match=request.headers.get("if-none-match"),
            if_range=request.headers.get("if-range"),
        )
        self.status_code = self.decision.status

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        decision, length = self.decision, self.body.length
        headers = {"etag": self.etag, "accept-ranges": "bytes", **self.extra}
        parts: list[tuple[bytes, int, int]] = []  # (part header, start, end)
        closing = b""
        if decision.status == 304:
            await self._start(send, 304, headers, None)
            await send({"type": "http.response.body", "body": b""})
            return
        if decision.status == 416:
            headers["content-range"] = f"bytes */{length}"
            body = (
                b'{"error":{"code":"range_not_satisfiable","message":"no requested range overlaps the body"}}'
            )
            await self._start(send, 416, {**headers, "content-type": "application/json"}, len(body))
            await send({"type": "http.response.body", "body": b"" if self.head else body})
            return
        if decision.status == 206 and len(decision.ranges) == 1:
            (start, end) = decision.ranges[0]
            headers["content-range"] = content_range(start, end, length)
            total = end - start
            parts = [(b"", start, end)]
        elif decision.status == 206:
            boundary = secrets.token_hex(12)
            for start, end in decision.ranges:
                head = (
                    f"\r\n--{boundary}\r\ncontent-type: {self.media_type}\r\n"
                    f"content-range: {content_range(start, end, length)}\r\n\r\n"
                ).encode()
                parts.append((head, start, end))
            closing = f"\r\n--{boundary}--\r\n".encode()
            total = sum(len(head) + end - start for head, start, end in parts) + len(closing)
            headers["content-type"] = f"multipart/byteranges; boundary={boundary}"
        else:
            total = length
            parts = [(b"", 0, length)]
        headers.setdefault("content-type", self.media_type)
        if self.head:
            await self._start(send, decision.status, headers, total)
            await send({"type": "http.response.body", "body": b""})
            return
        if self.limiter is not None and not self.limiter.try_acquire():
            busy = error_response(
                503, "too_many_streams", "too many concurrent streams", {"retry-after": "1"}
            )
            await busy(scope, receive, send)
            return
        # A client that leaves cancels everything below, even while the upstream hangs.
        # (A plain task and a cancel scope rather than a task group: errors before the
        # headers must reach the app's error handlers unwrapped.)
        with anyio.CancelScope() as cancel_scope:
            watcher = asyncio.ensure_future(self._cancel_on_disconnect(receive, cancel_scope))
            try:
                async with aclosing(self._pieces(parts, closing if len(parts) > 1 else b"")) as pieces:
                    # the first bytes are read before the headers go out, so the usual upstream
                    # failures (object changed, gone, unreachable) still get a JSON error status
                    first = await anext(pieces, b"")
                    await self._start(send, decision.status, headers, total)
                    await send({"type": "http.response.body", "body": first, "more_body": True})
                    async for piece in pieces:
                        await send({"type": "http.response.body", "body": piece, "more_body": True})
                        # uvicorn drops writes to a gone client silently, and page-cache reads
                        # never suspend: yield once per chunk so a disconnect cancels us
                        await anyio.lowlevel.checkpoint()
                    await send({"type": "http.response.body", "body": b""})
            finally:
                watcher.cancel()
                if self.limiter is not None:
                    self.limiter.release()

    async def _pieces(self, parts: list[tuple[bytes, int, int]], closing: bytes) -> AsyncIterator[Chunk]:
        """The body as it goes on the wire: part headers (multipart only), chunks, closing line."""
        for head, start, end in parts:
            if head:
                yield head
            async with aclosing(self.body.chunks(start, end, self.chunk_size)) as chunks:
                async for chunk in chunks:
                    yield chunk
        if closing:
            yield closing

    async def _start(self, send: Send, status: int, headers: dict[str, str], length: int | None) -> None:
        if length is not None:
            headers["content-length"] = str(length)
        raw = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})

    @staticmethod
    async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                scope.cancel()
                return
