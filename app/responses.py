"""BodyResponse: answers a GET/HEAD for a Body with Range, conditional requests and multipart/byteranges.

Bytes are streamed chunk by chunk (bounded memory). A client that disconnects
cancels the upstream read at once. If the upstream fails after the headers
went out, the exception propagates and the server aborts the connection, so
the client sees a short body, never a completed response with wrong bytes.

Under a server with ASGI's zero-copy send (app.protocol), the verified bytes of a local
archive go to the socket with sendfile(2) instead (reader.formats.runs): the file is checked
unchanged before the head goes out and again before the body's last bytes, which are held
in memory until every byte sent was acknowledged (docs/architecture.md, "Zero-copy").
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing

import anyio
import anyio.lowlevel
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from reader.bodies import TensorBytes
from reader.formats.body import Body, Chunk, read_body
from reader.formats.runs import FileRun, Piece, Streamed, body_pieces, has_file_runs
from reader.sources import fresh_buffer

from .errors import error_response
from .fields import Fields, encoded
from .httpranges import UNSATISFIABLE, BodyPlan, decide, plan_body
from .limits import StreamLimiter

CONDITIONS = (b"range", b"if-none-match", b"if-range")  # the request fields a response depends on
ZERO_COPY = "http.response.zerocopysend"  # ASGI's zero-copy send extension
DELIVERED = "pt2serve.delivered"  # app.protocol's: returns once the peer acknowledged every byte sent
HELD_TAIL = 64 << 10  # a zero-copy body's last file bytes, read into memory and sent after the last check


class BodyResponse(Response):
    """A Starlette response whose status and headers (Content-Length, Content-Range, ETag) are
    decided when it is made, from the request's Range and conditional headers; `.headers` and
    `background` work as on any Response."""

    def __init__(
        self,
        request: Request,
        body: Body,
        *,
        etag: str,
        media_type: str,
        chunk_size: int,
        headers: Mapping[str, str] | None = None,
        described: Fields | None = None,
        limiter: StreamLimiter | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        """`headers` (the caller's) and `described` (the representation's) go out as given; they
        must not name the fields the answer sets itself (ETag, Content-Type, Content-Range,
        Content-Length, Accept-Ranges). Pass `Fields` for fields sent often: encoded once."""
        asked: dict[bytes, bytes] = {}
        for name, value in request.scope["headers"]:  # one pass; the first of repeated fields
            if name in CONDITIONS:
                asked.setdefault(name, value)
        decision = decide(
            body.length,
            etag,
            range_header=_text(asked.get(b"range")),
            if_none_match=_text(asked.get(b"if-none-match")),
            if_range=_text(asked.get(b"if-range")),
        )
        multipart = len(decision.ranges) > 1
        boundary = secrets.token_hex(12) if multipart else ""  # a getrandom(2) call: only when used
        self.plan: BodyPlan = plan_body(decision, body.length, media_type, boundary)
        self.source = body
        self.chunk_size = chunk_size
        self.limiter = limiter
        self.head = request.method == "HEAD"
        self.status_code = self.plan.status
        self.background = background
        self.body = b""
        # what Starlette's init_headers would make of these fields, built directly (every request)
        raw = encoded(headers) if headers is not None else []
        raw += self.plan.headers
        raw.append((b"etag", etag.encode("latin-1")))
        raw.append((b"accept-ranges", b"bytes"))
        if self.plan.status != 304:
            raw.append((b"content-length", b"%d" % self.plan.length))
        if described is not None:
            raw += described.raw
        self.raw_headers = raw

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        plan = self.plan
        if plan.status in (304, 416) or self.head:
            await self._start(send)
            body = UNSATISFIABLE if plan.status == 416 and not self.head else b""
            await send({"type": "http.response.body", "body": body})
        elif self.limiter is not None and not self.limiter.try_acquire():
            busy = error_response(
                503, "too_many_streams", "too many concurrent streams", {"retry-after": "1"}
            )
            await busy(scope, receive, send)
            return
        else:
            try:
                if self._small():
                    await self._send_whole(send)
                elif (pieces := await self._zero_copy_pieces(scope)) is not None:
                    await self._send_zero_copy(scope, receive, send, pieces)
                else:
                    await self._stream(receive, send)
            finally:
                if self.limiter is not None:
                    self.limiter.release()
        if self.background is not None:
            await self.background()

    def _small(self) -> bool:
        """One plain part that fits in one chunk: bounded work, so no disconnect watcher."""
        parts = self.plan.parts
        return len(parts) == 1 and not parts[0].head and self.plan.length <= self.chunk_size

    async def _send_whole(self, send: Send) -> None:
        """A small body read in one piece before the headers go out, then sent as one message."""
        part = self.plan.parts[0]
        body: bytes | memoryview
        if isinstance(self.source, TensorBytes):  # one read into the buffer sent: no chunk generators
            body = fresh_buffer(part.end - part.start)  # of its own: the transport may keep it
            await self.source.read_into(body, part.start)
        else:
            body = await read_body(self.source, part.start, part.end, max(1, part.end - part.start))
        if len(body) != self.plan.length:
            raise RuntimeError(f"body gave {len(body)} bytes, Content-Length says {self.plan.length}")
        await self._start(send)
        await send({"type": "http.response.body", "body": body})

    async def _stream(self, receive: Receive, send: Send) -> None:
        # A client that leaves cancels everything below, even while the upstream hangs.
        # (A plain task and a cancel scope rather than a task group: errors before the
        # headers must reach the app's error handlers unwrapped.)
        with anyio.CancelScope() as cancel_scope:
            watcher = asyncio.ensure_future(_cancel_on_disconnect(receive, cancel_scope))
            try:
                async with aclosing(self._pieces()) as pieces:
                    # the first bytes are read before the headers go out, so the usual upstream
                    # failures (object changed, gone, unreachable) still get a JSON error status
                    first = await anext(pieces, b"")
                    await self._start(send)
                    if len(first) == self.plan.length:  # a small body: one message, one write
                        await send({"type": "http.response.body", "body": first})
                        return
                    await send({"type": "http.response.body", "body": first, "more_body": True})
                    async for piece in pieces:
                        await send({"type": "http.response.body", "body": piece, "more_body": True})
                        # uvicorn drops writes to a gone client silently, and page-cache reads
                        # never suspend: yield once per chunk so a disconnect cancels us
                        await anyio.lowlevel.checkpoint()
                    await send({"type": "http.response.body", "body": b""})
            finally:
                watcher.cancel()

    async def _zero_copy_pieces(self, scope: Scope) -> list[Piece] | None:
        """The body as memory, file runs and streamed parts, if the server can send files and some
        of it is a verified run of a local file; None: stream it."""
        if ZERO_COPY not in (scope.get("extensions") or {}):
            return None
        pieces: list[Piece] = []
        for part in self.plan.parts:
            if part.head:
                pieces.append(part.head)
            pieces += await body_pieces(self.source, part.start, part.end)
        if self.plan.closing:
            pieces.append(self.plan.closing)
        return pieces if has_file_runs(pieces) else None

    async def _send_zero_copy(self, scope: Scope, receive: Receive, send: Send, pieces: list[Piece]) -> None:
        """File runs with sendfile(2), the rest as body messages; the file checked unchanged before
        the head goes out and before the last bytes, which wait until all sent was acknowledged."""
        sources = list({id(p.source): p.source for p in pieces if isinstance(p, FileRun)}.values())
        last = pieces[-1]
        if isinstance(last, FileRun) and last.count > HELD_TAIL:  # its tail is read, not sent unread
            split = last.count - HELD_TAIL
            pieces[-1:] = [
                FileRun(last.source, last.offset, split),
                FileRun(last.source, last.offset + split, HELD_TAIL),
            ]
        delivered = DELIVERED in scope["extensions"]
        with contextlib.ExitStack() as holding, anyio.CancelScope() as cancel_scope:
            descriptors = {
                id(source): _Descriptor(holding.enter_context(source.held())) for source in sources
            }
            for source in sources:  # a changed file is still a JSON error here
                source.check_unchanged()
            watcher = asyncio.ensure_future(_cancel_on_disconnect(receive, cancel_scope))
            try:
                await self._start(send)
                for piece in pieces[:-1]:
                    if isinstance(piece, FileRun):
                        file = descriptors[id(piece.source)]
                        run = {"file": file, "offset": piece.offset, "count": piece.count, "more_body": True}
                        await send({"type": ZERO_COPY, **run})
                    elif isinstance(piece, Streamed):
                        await self._send_streamed(send, piece)
                    elif piece:
                        await send({"type": "http.response.body", "body": piece, "more_body": True})
                    await anyio.lowlevel.checkpoint()
                final = await self._final_bytes(send, pieces[-1])
                if delivered:
                    await send({"type": DELIVERED})
                for source in sources:
                    source.check_unchanged()
                await send({"type": "http.response.body", "body": final})
            finally:
                watcher.cancel()

    async def _send_streamed(self, send: Send, piece: Streamed, *, hold_last: bool = False) -> Chunk:
        """A streamed part's chunks as body messages; with `hold_last`, the last is returned unsent."""
        held: Chunk = b""
        async with aclosing(piece.body.chunks(piece.start, piece.end, self.chunk_size)) as chunks:
            async for chunk in chunks:
                if held:
                    await send({"type": "http.response.body", "body": held, "more_body": True})
                    await anyio.lowlevel.checkpoint()
                held = chunk
        if hold_last or not held:
            return held
        await send({"type": "http.response.body", "body": held, "more_body": True})
        return b""

    async def _final_bytes(self, send: Send, piece: Piece) -> Chunk:
        """The body's last piece in memory (everything before it sent)."""
        if isinstance(piece, FileRun):
            return await piece.source.read(piece.offset, piece.offset + piece.count)
        if isinstance(piece, Streamed):
            return await self._send_streamed(send, piece, hold_last=True)
        return piece

    async def _pieces(self) -> AsyncIterator[Chunk]:
        """The body as it goes on the wire: part headers (multipart only), chunks, closing line."""
        for part in self.plan.parts:
            if part.head:
                yield part.head
            async with aclosing(self.source.chunks(part.start, part.end, self.chunk_size)) as chunks:
                async for chunk in chunks:
                    yield chunk
        if self.plan.closing:
            yield self.plan.closing

    async def _start(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})


class _Descriptor:
    """What the zero-copy send's `file` asks for: an object with the descriptor's fileno()."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


def _text(field: bytes | None) -> str | None:
    return None if field is None else field.decode("latin-1")


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return
