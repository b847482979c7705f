"""A response body as a source reads it: the one helper under every read of `HttpSource`.

Every byte is counted (`count`: the source's stats, under the read's purpose); a transport failure
mid-body becomes `Retry`, after the bytes that did arrive were handed on, so the caller resumes at
the next byte; a body longer than asked is a `SourceError`, never bytes past the end. Where the
transport receives the body itself (http1's `Http1Response`), it lands straight in the caller's
memory and its pieces' CRC-32s are reported as the receiving thread took them; under httpx's own
HTTP/2 transport its chunks are copied in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence

import httpx

from ...errors import SourceError
from ..base import Checked
from .http1 import BodyStream, Http1Response
from .retry import Retry
from .scatter import Scatter


class TooLong(SourceError):
    """A body past the bytes asked for (none of the extra bytes were handed on)."""


class Body:
    """The body of `response`, read once, one of these ways."""

    def __init__(self, response: httpx.Response, count: Callable[[int], None], location: str) -> None:
        self.response = response
        self.count = count
        self.location = location
        self.received = 0  # bytes of the body handed on or landed so far
        # the transport's own stream, where it can land the body in place
        self.landing: BodyStream | None = response.body if isinstance(response, Http1Response) else None

    @property
    def length(self) -> int | None:
        """The Content-Length, if the answer says one."""
        value = self.response.headers.get("content-length", "")
        return int(value) if value.isdigit() else None

    async def chunks(self, limit: int | None = None, checked: Checked | None = None) -> AsyncIterator[bytes]:
        """The body's chunks as they arrive (bytes-like); at most `limit` bytes, else SourceError.
        `checked(at, nbytes, crc)` hears of body bytes whose CRC-32 was taken where they arrived."""
        if checked is not None and self.landing is not None:
            self.landing.checked = checked
        try:
            async for chunk in self.response.aiter_raw():
                if limit is not None and self.received + len(chunk) > limit:
                    raise TooLong(f"{self.location}: body longer than the {limit} bytes asked")
                self.received += len(chunk)
                self.count(len(chunk))
                yield chunk
        except httpx.TransportError as exc:
            raise self._cut(exc) from None

    async def read(self, *, expected: int | None = None, limit: int | None = None) -> bytes:
        """The whole body: `expected` bytes exactly (else Retry, a body cut short, or TooLong), or at
        most `limit` (else TooLong)."""
        parts = [chunk async for chunk in self.chunks(expected if limit is None else limit)]
        if expected is not None and self.received != expected:
            raise Retry(f"body of {self.received} bytes, expected {expected}")
        return b"".join(parts)

    async def into(self, views: memoryview | Sequence[memoryview]) -> AsyncIterator[int]:
        """The body written into `views` one after another (exactly as long as they are, or
        SourceError); yields how many more bytes landed as they land."""
        buffers = [views] if isinstance(views, memoryview) else list(views)
        size = sum(len(view) for view in buffers)
        if self.landing is None or self.length not in (None, size):
            sink = Scatter(buffers)
            async for chunk in self.chunks(size):
                sink.write(chunk)
                yield len(chunk)
            return
        try:
            async for nbytes in self.landing.receive_into(buffers):
                self.received += nbytes
                self.count(nbytes)
                yield nbytes
        except ValueError:  # a body without a Content-Length, longer than the memory
            raise TooLong(f"{self.location}: body longer than the {size} bytes asked") from None
        except httpx.TransportError as exc:
            raise self._cut(exc) from None

    async def land(self, views: memoryview | Sequence[memoryview]) -> None:
        """The whole body into `views`, as `into` writes it, where nobody waits on its progress."""
        async for _ in self.into(views):
            pass

    async def peek(self, size: int) -> bytes | None:
        """The body's first `size` bytes, left to be read; None where the transport cannot look."""
        if self.landing is None:
            return None
        try:
            return await self.landing.peek(size)
        except httpx.TransportError as exc:
            raise self._cut(exc) from None

    def _cut(self, error: httpx.TransportError) -> Retry:
        return Retry(f"body cut after {self.received} bytes ({type(error).__name__})")
