"""HTTP(S) range reads with httpx: exact bytes or a typed error, whatever the network does.

- Open is one speculative suffix GET (`Range: bytes=-N`) that yields the tail and the
  total size; servers that refuse suffix ranges get HEAD + an explicit range instead.
- Every later request pins the object: `If-Match` on a strong ETag (or the ETag and
  total size are compared), so a replaced object raises SourceChanged (exchange.py).
- Every 206 is checked: Content-Range must be the range asked, the body its length.
- Every range is read by one primitive (ranged.py): one GET into the caller's memory or as
  chunks, retried with capped, jittered exponential backoff (Retry-After honoured) within
  attempt and time budgets, a cut body resumed from the next byte; `read_into` receives the
  body straight into the caller's memory (body.py, over http1/'s connections), a big range as
  parts over several connections (parallel.py), as `stream` does. `read_ranges_into` of long
  ranges receives a multi-range answer the same way, each part straight into its view
  (multiget.py).
- Redirects are followed; later reads go straight to the final URL, without the
  origin's credentials, and an expired signed target is resolved again (redirects.py).
  `HttpOptions.check_url` is asked with every request's URL, each hop's, before it is sent.
- What a store does differently (Cloud Storage's generations, the Hub's commits, Azure's
  refusals) is a `StorePolicy` (policy.py) the source is given; its signing is its `httpx.Auth`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from typing import Any, Self

import httpx

from ..errors import SourceError
from .base import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_TAIL_SIZE,
    BytesAt,
    ByteSource,
    Checked,
    Landed,
    SourceStats,
    check_range,
    check_ranges,
    fresh_buffer,
    read_ranges_apart,
    redact_location,
)
from .exchange import Exchange
from .multiget import ranges_once
from .policy import StorePolicy
from .ranged import resumed
from .spans import COALESCE_GAP
from .tail import open_tail
from .transport.http1 import Http1Transport
from .transport.options import CheckUrl, HttpOptions
from .transport.parallel import ordered_parts, parts_for, parts_into
from .transport.proxies import Proxy
from .transport.proxies import mounts as proxy_mounts
from .transport.retry import deadline
from .transport.tls import verified_context


class HttpSource(ByteSource):
    """One remote object read by byte ranges over a pooled httpx client; what its store does
    differently is its `policy` (policy.py), its requests and their checks are its `exchange`."""

    reports_landed = True  # read_into tells `landed` of each stretch as it arrives
    reports_crcs = True  # stream tells `checked` of each piece the receive thread took the CRC-32 of

    def __init__(
        self,
        url: str,
        client: httpx.AsyncClient,
        options: HttpOptions,
        *,
        location: str | None = None,
        owns_client: bool = True,
        policy: StorePolicy | None = None,
    ) -> None:
        self.policy = policy or StorePolicy()
        self.exchange = Exchange(url, client, options, self.policy, location or redact_location(url))
        self.url = url  # as given: revalidate asks it
        self.location = self.exchange.location
        self.client = client
        self.options = options
        self.owns_client = owns_client
        self.stats: SourceStats = self.exchange.stats
        self.held: BytesAt | None = None  # bytes the open read and keeps (the tail, or a small whole object)
        # Does the server answer a multi-range request with multipart/byteranges? None: not asked yet.
        self.multirange: bool | None = self.policy.multirange if options.multi_range else False

    # -- opening -------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        tail_size: int = DEFAULT_TAIL_SIZE,
        options: HttpOptions | None = None,
        client: httpx.AsyncClient | None = None,
        auth: httpx.Auth | None = None,
        location: str | None = None,
        pinned: Mapping[str, Any] | None = None,
        policy: StorePolicy | None = None,
    ) -> Self:
        """`pinned`: what `pinned()` gave for a version opened before (a cache's): if one
        revalidation finds the object still that version, the open is that one request."""
        options = options or HttpOptions()
        owns = client is None
        client = client or make_client(options, auth)
        source = cls(url, client, options, location=location, owns_client=owns, policy=policy)
        try:
            if pinned is not None and await source.exchange.still(pinned):
                return source
            tail = max(tail_size, 1)
            source.held = await source.exchange.retrying(
                lambda: open_tail(source.exchange, tail, source._fetch)
            )
        except BaseException:
            await source.close()
            raise
        return source

    @property
    def size(self) -> int:
        return self.exchange.size

    @property
    def etag(self) -> str | None:
        return self.exchange.etag

    @property
    def last_modified(self) -> str | None:
        return self.exchange.last_modified

    @property
    def identity(self) -> str:
        exchange = self.exchange
        return self.policy.identity() or exchange.etag or f"{exchange.last_modified}-{exchange.size}"

    @property
    def fast_connection(self) -> float | None:
        return self.options.fast_connection

    @property
    def part_size(self) -> int:
        return self.options.part_size

    @property
    def part_cost(self) -> float | None:
        return self.options.part_cost

    def pinned(self) -> dict[str, Any]:
        """What names the version opened, to open it again with one revalidation."""
        return self.exchange.pinned()

    # -- reading -------------------------------------------------------------

    def _kept(self, start: int, end: int) -> memoryview | None:
        """Bytes [start, end) where the open kept them (the tail), else None."""
        return self.held.slice(start, end) if self.held and self.held.covers(start, end) else None

    async def read(self, start: int, end: int, *, purpose: str = "data") -> bytes:
        check_range(self, start, end)
        if start == end:
            return b""
        kept = self._kept(start, end)
        return kept.tobytes() if kept is not None else await self._fetch(start, end, purpose)

    async def read_into(
        self, start: int, buffer: memoryview, *, purpose: str = "data", landed: Landed | None = None
    ) -> None:
        """Bytes [start, start + len(buffer)) into `buffer`: received straight into it (body.py),
        a big range in parts over several connections as `stream` fetches it, each part retried and
        resumed into its own slice. `landed(at, nbytes)` hears of archive bytes
        [at, at + nbytes) as they land (so a caller can check what is in while the rest arrives)."""
        end = start + len(buffer)
        check_range(self, start, end)
        kept = self._kept(start, end)
        if kept is not None:
            buffer[:] = kept
            if landed is not None:
                landed(start, end - start)
            return
        until = deadline(self.options)

        async def receive(at: int, view: memoryview) -> None:
            async with aclosing(
                resumed(self.exchange, at, at + len(view), purpose, until, into=view)
            ) as pieces:
                async for piece in pieces:
                    if landed is not None:
                        landed(at, len(piece))
                    at += len(piece)

        parts = parts_for(self.options, end - start)
        await (receive(start, buffer) if parts is None else parts_into(receive, start, buffer, parts))

    async def stream(
        self,
        start: int,
        end: int,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        purpose: str = "data",
        checked: Checked | None = None,
    ) -> AsyncIterator[bytes]:
        check_range(self, start, end)
        kept = self._kept(start, end)
        if kept is not None:
            data = kept.tobytes()
            for at in range(0, len(data), chunk_size):
                yield data[at : at + chunk_size]
            return
        until = deadline(self.options)

        async def once(low: int, high: int) -> AsyncIterator[bytes]:
            async with aclosing(resumed(self.exchange, low, high, purpose, until, checked=checked)) as pieces:
                async for data in pieces:
                    # as received (so a cut loses nothing already here), at most chunk_size each
                    for at in range(0, len(data), chunk_size):
                        yield data[at : at + chunk_size]

        parts = parts_for(self.options, end - start)
        chunks = once(start, end) if parts is None else ordered_parts(once, start, end, parts)
        async with aclosing(chunks) as pieces:
            async for chunk in pieces:
                yield chunk

    async def _fetch(self, start: int, end: int, purpose: str) -> bytes:
        parts = [chunk async for chunk in self.stream(start, end, chunk_size=1 << 20, purpose=purpose)]
        data = b"".join(parts)
        if len(data) != end - start:  # cannot happen unless a check above is broken
            raise SourceError(f"{self.location}: got {len(data)} bytes for a {end - start}-byte range")
        return data

    # -- several ranges a request (multiget.py) --------------------------------

    async def serves_multiple_ranges(self) -> bool:
        """Whether the server answers several ranges in one request (asked once, with two ranges of a
        byte each, and remembered): nginx does; S3 answers 200 with the whole object (its body is
        not read)."""
        if self.multirange is None and self.size >= 3:
            await self._ranges([(0, 1), (2, 3)], [fresh_buffer(2)], "data")
        return bool(self.multirange)

    async def read_ranges_into(
        self,
        ranges: Sequence[tuple[int, int]],
        into: Sequence[memoryview],
        *,
        purpose: str = "data",
        fallback_gap: int = COALESCE_GAP,
    ) -> None:
        """Bytes [start, end) of each of `ranges` (sorted, disjoint), end to end across the buffers of
        `into` (each holds whole ranges: one, or several in a row). In one request where the server
        answers multipart/byteranges (the caller keeps the header short: multirange.batches), each
        part checked against what was asked; else (a 200 or a single range to a multi-range request:
        its body is not read, and the answer remembered) the ranges joined where at most
        `fallback_gap` lies between them, one range a request."""
        check_ranges(self, ranges, into)
        if len(ranges) > 1 and self.multirange is not False and await self._ranges(ranges, into, purpose):
            return
        await read_ranges_apart(self, ranges, into, purpose=purpose, gap=fallback_gap)

    async def _ranges(
        self, ranges: Sequence[tuple[int, int]], into: Sequence[memoryview], purpose: str
    ) -> bool:
        """One multi-range GET, retried; whether the server served it is remembered (`multirange`)."""
        self.multirange = await self.exchange.retrying(
            lambda: ranges_once(self.exchange, ranges, into, purpose)
        )
        return self.multirange

    # -- the version ---------------------------------------------------------

    async def revalidate(self) -> bool:
        """True if the object is still the one opened (a conditional HEAD, 304 when ETags allow, or
        the store's own question), retried as every request is."""
        return await self.exchange.retrying(self.exchange.revalidate_once)

    async def close(self) -> None:
        if self.owns_client:
            await self.client.aclose()


def make_client(options: HttpOptions, auth: httpx.Auth | None = None) -> httpx.AsyncClient:
    """A client for remote reads: the verified TLS context (tls.py) and the environment's proxies
    (proxies.py) on every transport it mounts."""
    timeout = httpx.Timeout(
        connect=options.connect_timeout, read=options.read_timeout, write=options.read_timeout, pool=None
    )
    context = verified_context(options.ca_bundle, http2=options.http2)

    def transport_for(proxy: Proxy | None) -> httpx.AsyncBaseTransport:
        if options.http2:  # httpcore speaks HTTP/2 (negotiated by ALPN, else HTTP/1.1)
            through = None
            if proxy is not None:  # an https:// proxy's own certificate: verified as any server's
                to_proxy = verified_context(options.ca_bundle) if proxy.scheme == "https" else None
                through = httpx.Proxy(proxy.url, headers=proxy.headers, ssl_context=to_proxy)
            return httpx.AsyncHTTPTransport(http2=True, verify=context, proxy=through)
        return Http1Transport(
            verify=context,
            proxy=proxy,
            receive_thread=options.receive_thread,
            resolve_host=options.resolve_host,
        )

    direct, mounts = proxy_mounts(transport_for)
    hooks = {"request": [_checking(options.check_url)]} if options.check_url is not None else None
    return httpx.AsyncClient(
        transport=direct, mounts=mounts, timeout=timeout, auth=auth, follow_redirects=True, event_hooks=hooks
    )


def _checking(check_url: CheckUrl) -> Callable[[httpx.Request], Awaitable[None]]:
    """httpx's request hook for `HttpOptions.check_url`: httpx calls it for every request it sends,
    each redirect hop and each request an auth flow makes, after signing and before sending."""

    async def check(request: httpx.Request) -> None:
        check_url(str(request.url))

    return check
