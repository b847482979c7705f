"""HTTP(S) range reads with httpx: exact bytes or a typed error, whatever the network does.

- Open is one speculative suffix GET (`Range: bytes=-N`) that yields the tail and the
  total size; servers that refuse suffix ranges get HEAD + an explicit range instead.
- Every later request pins the object: `If-Match` on a strong ETag (or the ETag and
  total size are compared), so a replaced object raises SourceChanged.
- Every 206 is checked: Content-Range must be the range asked, the body its length.
- Connect errors, 408/429/5xx and bodies cut mid-stream are retried with capped,
  jittered exponential backoff (Retry-After honoured) within attempt and time
  budgets; a cut body resumes from the next byte.
- `read_into` receives the body straight into the caller's memory (body.py, over http1/'s
  connections), as parts over several connections when `stream` would use them (parallel.py's
  `parts_into`), with the same checks, pinning and retries; a cut body resumes writing at the
  first byte it did not receive. `read_ranges_into` of long ranges receives a
  multi-range answer the same way, each part straight into its view (its heads checked after).
- Redirects are followed; later reads go straight to the final URL, without the
  origin's credentials, and an expired signed target is resolved again (redirects.py).
  `HttpOptions.check_url` is asked with every request's URL, each hop's, before it is sent.
"""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from typing import Any, Self, TypeVar

import httpx
import numpy as np

from ..errors import SourceChanged, SourceError
from . import multirange
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
    per_range,
    read_ranges_apart,
    redact_location,
)
from .body import Body, TooLong
from .http1 import Http1Transport
from .options import CheckUrl, HttpOptions
from .parallel import ordered_parts, parts_into
from .proxies import Proxy, refusal
from .proxies import mounts as proxy_mounts
from .redirects import EXPIRED_STATUS, keeps_credentials, origin_of, without_credentials
from .retry import Retry, back_off, check_deadline, deadline, retry_after, retrying
from .scatter import gather
from .tls import certificate_refusal, verified_context

CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
UNSATISFIED_RANGE = re.compile(r"bytes \*/(\d+)")
RETRYABLE_STATUS = {408, 425, 429, 500, 502, 503, 504}
SUFFIX_REFUSED_STATUS = {405, 416, 501}
# A multi-range read whose ranges average at least this many bytes is received straight into the
# caller's memory (one socket read per part at most); shorter parts come whole in one buffer and
# are copied out, fewer reads than parts
SCATTER_MIN = 64 << 10

T = TypeVar("T")


class HttpSource(ByteSource):
    """One remote object read by byte ranges over a pooled httpx client."""

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
    ) -> None:
        self.url = url  # as given: revalidate asks it
        self.resolve_url = url  # where a read resolves again; pinned to the version opened (_pinned_url)
        self.read_url = url  # where reads go: the final URL of the last redirect followed
        self.origin = origin_of(url)  # the only origin its credentials go to
        self.location = location or redact_location(url)
        self.client = client
        self.options = options
        self.owns_client = owns_client
        self.stats = SourceStats()
        self.size = 0
        self.etag: str | None = None
        self.last_modified: str | None = None
        self._held: BytesAt | None = None  # bytes kept from open (the tail, or a small whole object)
        if not options.multi_range:
            self.multirange = False  # one range a request: never asked

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
        **fields: Any,  # a subclass's own keyword arguments
    ) -> Self:
        """`pinned`: what `pinned()` gave for a version opened before (a cache's): if one
        revalidation finds the object still that version, the open is that one request."""
        options = options or HttpOptions()
        owns = client is None
        client = client or make_client(options, auth)
        source = cls(url, client, options, location=location, owns_client=owns, **fields)
        try:
            if pinned is not None and await source._still(pinned):
                return source
            await retrying(lambda: source._open_with_tail(max(tail_size, 1)), options, source.location)
        except BaseException:
            await source.close()
            raise
        return source

    @property
    def identity(self) -> str:
        return self.etag or f"{self.last_modified}-{self.size}"

    @property
    def fast_connection(self) -> float | None:
        return self.options.fast_connection

    @property
    def part_size(self) -> int:
        return self.options.part_size

    @property
    def part_cost(self) -> float | None:
        return self.options.part_cost

    @property
    def held(self) -> BytesAt | None:
        """Bytes the open read and keeps (the tail, or a small whole object)."""
        return self._held

    # the attributes that name the version opened (a subclass adds its own: a generation, a commit)
    PINNED: tuple[str, ...] = ("size", "etag", "last_modified")

    def pinned(self) -> dict[str, Any]:
        """What names the version opened, to open it again with one revalidation (no secrets: a URL
        is kept only where it differs from the one given, and then names a version, not a grant)."""
        state = {name: getattr(self, name) for name in self.PINNED}
        if self.resolve_url != self.url:
            state["resolve_url"] = self.resolve_url
        return state

    async def _still(self, pinned: Mapping[str, Any]) -> bool:
        """Take `pinned` as the version opened if the object still is that version (one request)."""
        for name in self.PINNED:
            setattr(self, name, pinned.get(name))
        self.resolve_url = self.read_url = pinned.get("resolve_url") or self.url
        if await self.revalidate():
            return True
        for name in self.PINNED:
            setattr(self, name, None)
        self.size = 0
        self.resolve_url = self.read_url = self.url
        return False

    async def _open_with_tail(self, tail_size: int) -> None:
        request = self._request("GET", {"Range": f"bytes=-{tail_size}"})
        response = await self._send(request, "open")
        try:
            if response.status_code in SUFFIX_REFUSED_STATUS:
                await response.aclose()
                await self._open_with_head(tail_size)
                return
            self._check_status(response, allow=(200, 206))
            self._remember_validators(response)
            if response.status_code == 200:
                self._held = BytesAt(0, await self._whole_body(response, "open"))
                self.size = len(self._held.data)
                return
            start, end, total = self._content_range(response)
            if end != total - 1:
                raise SourceError(f"{self.location}: suffix range answered with bytes {start}-{end}/{total}")
            self.size = total
            self._held = BytesAt(start, await self._body(response, "open").read(expected=end + 1 - start))
        finally:
            await response.aclose()

    async def _open_with_head(self, tail_size: int) -> None:
        response = await self._send(self._request("HEAD", {}), "open")
        await response.aclose()
        self._check_status(response, allow=(200,))
        length = response.headers.get("content-length")
        if length is None or not length.isdigit():
            raise SourceError(f"{self.location}: no suffix ranges and no Content-Length; cannot find the end")
        self._remember_validators(response)
        self.size = int(length)
        start = max(0, self.size - tail_size)
        self._held = BytesAt(start, await self._fetch(start, self.size, "open"))

    def _remember_validators(self, response: httpx.Response) -> None:
        self.etag = response.headers.get("etag")
        self.last_modified = response.headers.get("last-modified")
        pinned = self._pinned_url(response)
        if pinned is not None:
            self.resolve_url = pinned
            if not response.history:  # answered by the origin itself: later reads ask the pinned URL
                self.read_url = pinned

    def _pinned_url(self, response: httpx.Response) -> str | None:
        """The URL that names the version the open's answer came from, where `url` may move
        (a Hub revision such as `main`); None: `url` itself, pinned by its validators."""
        return None

    # -- reading -------------------------------------------------------------

    async def read(self, start: int, end: int, *, purpose: str = "data") -> bytes:
        check_range(self, start, end)
        if start == end:
            return b""
        if self._held and self._held.covers(start, end):
            offset = start - self._held.start
            return self._held.data[offset : offset + end - start]
        return await self._fetch(start, end, purpose)

    async def read_into(
        self, start: int, buffer: memoryview, *, purpose: str = "data", landed: Landed | None = None
    ) -> None:
        """Bytes [start, start + len(buffer)) into `buffer`: received straight into it (body.py),
        a big range in parts over several connections as `stream` fetches it, each part retried and
        resumed into its own slice. `landed(at, nbytes)` hears of archive bytes
        [at, at + nbytes) as they land (so a caller can check what is in while the rest arrives)."""
        end = start + len(buffer)
        check_range(self, start, end)
        if self._held and self._held.covers(start, end):
            buffer[:] = await self.read(start, end, purpose=purpose)
            if landed is not None:
                landed(start, end - start)
            return
        receive = functools.partial(
            self._receive_once, purpose=purpose, deadline=deadline(self.options), landed=landed
        )
        parts = self._parts(end - start)
        if parts is not None:
            await parts_into(receive, start, buffer, **parts)
        else:
            await receive(start, buffer)

    def _parts(self, size: int) -> dict[str, Any] | None:
        """How the parallel reader splits a read of `size` bytes; None: one connection."""
        options = self.options
        if options.parallel_parts > 1 and size > max(options.parallel_above, options.part_size):
            return {
                "part_size": options.part_size,
                "parts_in_flight": options.parallel_parts,
                "fast_connection": options.fast_connection,
            }
        return None

    async def _receive_once(
        self,
        start: int,
        buffer: memoryview,
        *,
        purpose: str,
        deadline: float | None,
        landed: Landed | None = None,
    ) -> None:
        """`buffer`'s bytes over one connection at a time: retried, resumed into the next byte."""
        filled = 0
        attempt = 0
        while filled < len(buffer):
            try:
                async with aclosing(self._range_into(start + filled, buffer[filled:], purpose)) as arrivals:
                    async for nbytes in arrivals:
                        if landed is not None:
                            landed(start + filled, nbytes)
                        filled += nbytes
                        check_deadline(deadline, self.location)
                if filled < len(buffer):
                    raise Retry(f"body ended after {filled} of {len(buffer)} bytes")
            except Retry as problem:
                attempt += 1
                await back_off(problem, attempt, deadline, self.options, self.location)

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
        if self._held and self._held.covers(start, end):
            data = await self.read(start, end)
            for at in range(0, len(data), chunk_size):
                yield data[at : at + chunk_size]
            return
        once = functools.partial(
            self._stream_once,
            chunk_size=chunk_size,
            purpose=purpose,
            deadline=deadline(self.options),
            checked=checked,
        )
        parts = self._parts(end - start)
        chunks = once(start, end) if parts is None else ordered_parts(once, start, end, **parts)
        async with aclosing(chunks) as pieces:
            async for chunk in pieces:
                yield chunk

    async def _stream_once(
        self,
        start: int,
        end: int,
        *,
        chunk_size: int,
        purpose: str,
        deadline: float | None,
        checked: Checked | None,
    ) -> AsyncIterator[bytes]:
        """[start, end) over one connection at a time: retried, resumed from the next byte."""
        position = start
        attempt = 0
        while position < end:
            try:
                async with aclosing(
                    self._range_chunks(position, end, chunk_size, purpose, checked)
                ) as chunks:
                    async for chunk in chunks:
                        position += len(chunk)
                        check_deadline(deadline, self.location)
                        yield chunk
                if position < end:
                    raise Retry(f"body ended after {position - start} of {end - start} bytes")
            except Retry as problem:
                attempt += 1
                await back_off(problem, attempt, deadline, self.options, self.location)

    async def _fetch(self, start: int, end: int, purpose: str) -> bytes:
        parts = [chunk async for chunk in self.stream(start, end, chunk_size=1 << 20, purpose=purpose)]
        data = b"".join(parts)
        if len(data) != end - start:  # cannot happen unless a check above is broken
            raise SourceError(f"{self.location}: got {len(data)} bytes for a {end - start}-byte range")
        return data

    async def _range_into(self, start: int, view: memoryview, purpose: str) -> AsyncIterator[int]:
        """One ranged GET whose body goes into `view`; yields how many bytes landed as they land (so
        a cut loses nothing already here); raises Retry for transient trouble."""
        end = start + len(view)
        request = self._request("GET", {"Range": f"bytes={start}-{end - 1}", **self._pin()})
        response = await self._send(request, purpose)
        try:
            if response.status_code == 200:
                whole = await self._whole_body(response, purpose)
                self._check_same_object(response, len(whole))
                view[:] = whole[start:end]
                yield len(view)
                return
            self._check_partial(response, start, end)
            async for nbytes in self._body(response, purpose).into(view):
                yield nbytes
        finally:
            await response.aclose()

    def _check_partial(self, response: httpx.Response, start: int, end: int) -> None:
        """A 206 of the object opened, with exactly bytes [start, end) to come."""
        self._check_status(response, allow=(206,))
        self._check_same_object(response, None)
        got = self._content_range(response)
        if got[:2] != (start, end - 1):
            raise SourceError(
                f"{self.location}: asked for bytes {start}-{end - 1}, server sent {got[0]}-{got[1]}"
            )
        length = response.headers.get("content-length")
        if length is not None and length != str(end - start):
            raise SourceError(
                f"{self.location}: Content-Length {length} does not match range {start}-{end - 1}"
            )

    async def _range_chunks(
        self, start: int, end: int, chunk_size: int, purpose: str, checked: Checked | None = None
    ) -> AsyncIterator[bytes]:
        """One ranged GET; yields body chunks; raises Retry for transient trouble."""
        request = self._request("GET", {"Range": f"bytes={start}-{end - 1}", **self._pin()})
        response = await self._send(request, purpose)
        try:
            if response.status_code == 200:
                whole = await self._whole_body(response, purpose)
                self._check_same_object(response, len(whole))
                yield whole[start:end]
                return
            self._check_partial(response, start, end)
            archive = None if checked is None else functools.partial(_shifted, checked, start)
            async for data in self._body(response, purpose).chunks(end - start, archive):
                # as received (so a cut loses nothing already here), at most chunk_size each
                for at in range(0, len(data), chunk_size):
                    yield data[at : at + chunk_size]
        finally:
            await response.aclose()

    def _body(self, response: httpx.Response, purpose: str) -> Body:
        return Body(response, functools.partial(self.stats.add_bytes, purpose), self.location)

    async def _whole_body(self, response: httpx.Response, purpose: str) -> bytes:
        """A 200 where a range was asked: fine for small objects, refused for big ones."""
        cap = self.options.full_body_cap
        body = self._body(response, purpose)
        if body.length is not None and body.length > cap:
            raise SourceError(
                f"{self.location} ignores Range and is {body.length} bytes; refusing to download "
                f"more than {cap} (HttpOptions.full_body_cap)"
            )
        try:
            return await body.read(limit=cap)
        except TooLong:
            raise SourceError(
                f"{self.location} ignores Range and sends more than {cap} bytes; refusing"
            ) from None

    # -- several ranges a request (multirange.py) ------------------------------

    # Does the server answer a multi-range request with multipart/byteranges? None: not asked yet.
    multirange: bool | None = None

    async def serves_multiple_ranges(self) -> bool:
        """Whether the server answers several ranges in one request (asked once, with two ranges of a
        byte each, and remembered): nginx does; S3 answers 200 with the whole object (its body is
        not read)."""
        if self.multirange is None and self.size >= 3:
            await self._retrying(lambda: self._ranges_once([(0, 1), (2, 3)], [fresh_buffer(2)], "data"))
        return bool(self.multirange)

    async def read_ranges_into(
        self,
        ranges: Sequence[tuple[int, int]],
        into: Sequence[memoryview],
        *,
        purpose: str = "data",
        fallback_gap: int = 64 << 10,
    ) -> None:
        """Bytes [start, end) of each of `ranges` (sorted, disjoint), end to end across the buffers of
        `into` (each holds whole ranges: one, or several in a row). In one request where the server
        answers multipart/byteranges (the caller keeps the header short: multirange.batches), each
        part checked against what was asked; else (a 200 or a single range to a multi-range request:
        its body is not read, and the answer remembered) the ranges joined where at most
        `fallback_gap` lies between them, one range a request."""
        check_ranges(self, ranges, into)
        several = len(ranges) > 1 and self.multirange is not False
        if several and await self._retrying(lambda: self._ranges_once(ranges, into, purpose)):
            return
        await read_ranges_apart(self, ranges, into, purpose=purpose, gap=fallback_gap)

    async def _ranges_once(
        self, ranges: Sequence[tuple[int, int]], into: Sequence[memoryview], purpose: str
    ) -> bool:
        """One multi-range GET into `into`; False: the server does not serve several ranges a request
        (`multirange` set False, nothing read).

        An answer laid out as its first head predicts (multirange.layout: nginx's layout) is placed
        without parsing: long parts (SCATTER_MIN on average) are received straight into their places,
        the heads into a frame compared with the prediction afterwards; short ones come whole into one
        buffer, its heads compared and its parts gathered out (scatter.gather). Anything else is
        parsed: its parts copied in, or the parser's error."""
        request = self._request("GET", {"Range": multirange.range_header(ranges), **self._pin()})
        response = await self._send(request, purpose)
        try:
            boundary = multirange.boundary_of(response.headers.get("content-type"))
            if response.status_code == 200 or (response.status_code == 206 and boundary is None):
                self._check_same_object(response, None)
                self.multirange = False  # its body is dropped with the connection
                return False
            self._check_status(response, allow=(206,))
            self._check_same_object(response, None)
            assert boundary is not None
            self.multirange = True
            body = self._body(response, purpose)
            views = per_range(into, ranges)
            laid = None
            if body.length is not None:
                window = await body.peek(multirange.HEAD_WINDOW)
                if window is not None:
                    laid = multirange.layout(window, boundary, ranges, self.size)
            if laid is None or laid.length != body.length:
                chunks = self._multipart_body(body)
            elif int(laid.sizes.sum()) >= SCATTER_MIN * len(ranges):
                frame = memoryview(bytearray(len(laid.frame)))
                sink, at = [], 0
                for head, view in zip(laid.heads.tolist(), views):
                    sink += [frame[at : at + head], view]
                    at += head
                sink.append(frame[at:])
                await body.land(sink)
                if frame == laid.frame:
                    return True
                chunks = _one(_joined(sink))  # not laid out as its first head said
            else:
                whole = fresh_buffer(laid.length)
                await body.land(whole)
                if laid.check(whole):
                    gather(np.frombuffer(whole, np.uint8), laid.starts, laid.sizes, into)
                    return True
                chunks = _one(whole)
            await self._parse_parts(chunks, boundary, ranges, views)
            return True
        finally:
            await response.aclose()

    async def _parse_parts(
        self,
        chunks: AsyncIterator[memoryview | bytes],
        boundary: bytes,
        ranges: Sequence[tuple[int, int]],
        views: Sequence[memoryview],
    ) -> None:
        """A multipart body's parts, as the parser finds them, each into its range's view."""
        parser = multirange.ByteRangesParser(boundary, ranges, self.size, self.location)
        async for chunk in chunks:
            for index, at, piece in parser.feed(chunk):
                views[index][at : at + len(piece)] = piece
        parser.finish()  # every range came, whole

    async def _multipart_body(self, body: Body) -> AsyncIterator[memoryview | bytes]:
        """A multipart body's chunks; one with a Content-Length received whole into one buffer first
        (one allocation, huge pages, where each socket read would fault in a fresh one)."""
        if body.length is None:
            async for chunk in body.chunks():
                yield chunk
            return
        whole = fresh_buffer(body.length)
        await body.land(whole)
        yield whole

    # -- validation ----------------------------------------------------------

    def _pin(self) -> dict[str, str]:
        """Headers that make the server refuse (412) if the object is not the one opened."""
        if self.etag and not self.etag.startswith("W/"):
            return {"If-Match": self.etag}
        if self.last_modified and not self.etag:
            return {"If-Unmodified-Since": self.last_modified}
        return {}

    def _check_same_object(self, response: httpx.Response, whole_size: int | None) -> None:
        etag = response.headers.get("etag")
        if self.etag and etag and etag != self.etag:
            raise SourceChanged(f"{self.location} changed: ETag {self.etag} is now {etag}")
        if whole_size is not None and whole_size != self.size:
            raise SourceChanged(f"{self.location} changed: {self.size} bytes are now {whole_size}")

    def _content_range(self, response: httpx.Response) -> tuple[int, int, int]:
        header = response.headers.get("content-range", "")
        match = CONTENT_RANGE.fullmatch(header.strip())
        if not match or match.group(3) == "*":
            raise SourceError(f"{self.location}: 206 with unusable Content-Range {header!r}")
        start, end, total = int(match.group(1)), int(match.group(2)), int(match.group(3))
        if start > end or end >= total:
            raise SourceError(f"{self.location}: impossible Content-Range {header!r}")
        if self.size and total != self.size:
            raise SourceChanged(f"{self.location} changed: {self.size} bytes are now {total}")
        return start, end, total

    def _check_status(self, response: httpx.Response, allow: tuple[int, ...]) -> None:
        status = response.status_code
        if status in allow:
            return
        if status in RETRYABLE_STATUS:
            raise Retry(f"HTTP {status}", retry_after(response, self.options.max_retry_after))
        if status == 412:
            raise SourceChanged(f"{self.location} changed since it was opened (412 Precondition Failed)")
        if status == 404 and self.size:
            raise SourceChanged(f"{self.location} is gone (404) since it was opened")
        if status == 416:
            match = UNSATISFIED_RANGE.fullmatch(response.headers.get("content-range", "").strip())
            if match and self.size and int(match.group(1)) != self.size:
                raise SourceChanged(f"{self.location} changed: now {match.group(1)} bytes")
        redirected = origin_of(response.url) != self.origin
        if status in EXPIRED_STATUS and redirected and not response.history:
            # straight to a redirect target remembered from an earlier answer: its signature may
            # have expired, so resolve again from the origin (a fresh one refusing is final, below)
            self.read_url = self.resolve_url
            raise Retry(f"HTTP {status} from the redirect target {response.url.host}; resolving again", 0.0)
        raise SourceError(f"{self.location}: HTTP {status} ({self._refusal(response)})")

    def _refusal(self, response: httpx.Response) -> str:
        """What a final error status means, for the message."""
        status = response.status_code
        reason = {401: "unauthorized", 403: "access denied", 404: "not found"}.get(
            status, "unexpected status"
        )
        if origin_of(response.url) != self.origin:
            kind = "refused or expired signature" if status in EXPIRED_STATUS else reason
            return f"{kind}, from the redirect target {response.url.host}"
        return reason

    # -- requests and retries ------------------------------------------------

    def _request(self, method: str, headers: Mapping[str, str], url: str | None = None) -> httpx.Request:
        """A request to `url` (default: where reads go); the origin's credentials only to the origin."""
        all_headers = {"Accept-Encoding": "identity", **self.options.headers, **headers}
        request = self.client.build_request(method, url or self.read_url, headers=all_headers)
        if not keeps_credentials(request.url, self.origin):
            without_credentials(request.headers)
        return request

    async def _send(
        self, request: httpx.Request, purpose: str, *, follow_redirects: bool = True
    ) -> httpx.Response:
        self.stats.record(purpose, 0)
        # an auth flow (bearer token, SigV4) signs for the origin only: not for a redirect target
        auth = httpx.USE_CLIENT_DEFAULT if keeps_credentials(request.url, self.origin) else None
        try:
            response = await self.client.send(
                request, stream=True, auth=auth, follow_redirects=follow_redirects
            )
        except httpx.TooManyRedirects:
            raise SourceError(f"{self.location}: too many redirects") from None
        except httpx.UnsupportedProtocol:
            raise SourceError(f"{self.location}: redirected to a URL that is not http(s)") from None
        except httpx.TransportError as exc:
            refused = certificate_refusal(exc, _failed_host(exc)) or refusal(exc)
            if refused:  # another attempt would meet the same answer
                raise SourceError(f"{self.location}: {refused}") from None
            raise Retry(f"{type(exc).__name__}: {exc}", unreachable=True) from None
        if response.history:  # each hop was a request
            self.stats.record(purpose, 0, requests=len(response.history))
            if response.is_success:  # later reads go straight to the final URL
                self.read_url = str(response.url)
        return response

    async def _retrying(self, attempt_once: Callable[[], Awaitable[T]]) -> T:
        return await retrying(attempt_once, self.options, self.location)

    async def revalidate(self) -> bool:
        """True if the object is still the one opened (a conditional HEAD; 304 when ETags allow),
        retried as every request is."""
        return await self._retrying(self._revalidate_once)

    async def _revalidate_once(self) -> bool:
        headers = {"If-None-Match": self.etag} if self.etag else {}
        response = await self._send(self._request("HEAD", headers, self.url), "revalidate")
        await response.aclose()
        if response.status_code == 304:
            return True
        if response.status_code != 200:
            return False
        same_etag = response.headers.get("etag") == self.etag
        same_size = response.headers.get("content-length") in (None, str(self.size))
        return same_etag and same_size and response.headers.get("last-modified") == self.last_modified

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


def _failed_host(error: httpx.TransportError) -> str | None:
    try:
        return error.request.url.host
    except RuntimeError:  # no request attached
        return None


def _shifted(checked: Checked, start: int, at: int, nbytes: int, crc: int) -> None:
    """`checked` told of body offsets as the archive's (the body starts at `start`)."""
    checked(start + at, nbytes, crc)


def _joined(buffers: list[memoryview]) -> memoryview:
    """The buffers' bytes end to end, in a buffer of their own."""
    return memoryview(bytearray(b"".join(buffers)))


async def _one(body: memoryview) -> AsyncIterator[memoryview]:
    yield body
