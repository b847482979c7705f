"""One remote object's requests and the checks of every answer against the version opened.

`Exchange` is what every read of an `HttpSource` goes through: it builds a request (the origin's
credentials only to the origin, `If-Match` on the version opened), sends it (a transport failure
is a `Retry`, a redirect's final URL is where later reads go), and checks the answer: its status
(retryable, refused, the object changed), its Content-Range against the range asked, its ETag,
size and the store's own validators (`StorePolicy`) against the version opened.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx

from ..errors import SourceChanged, SourceError
from .base import SourceStats
from .policy import StorePolicy
from .transport.body import Body, TooLong
from .transport.contentrange import ContentRange, parse_content_range
from .transport.options import HttpOptions
from .transport.proxies import refusal
from .transport.redirects import EXPIRED_STATUS, keeps_credentials, origin_of, without_credentials
from .transport.retry import Retry, retry_after, retrying
from .transport.tls import certificate_refusal

T = TypeVar("T")

RETRYABLE_STATUS = {408, 425, 429, 500, 502, 503, 504}
REASONS = {401: "unauthorized", 403: "access denied", 404: "not found"}


class Exchange:
    """Requests for one object, and the version they must all find (size, ETag, Last-Modified, and
    what the policy keeps). `url` as given; `resolve_url` where a read resolves again (the version
    opened, where the store names one); `read_url` where reads go (the last redirect's target)."""

    def __init__(
        self,
        url: str,
        client: httpx.AsyncClient,
        options: HttpOptions,
        policy: StorePolicy,
        location: str,
    ) -> None:
        self.url = self.resolve_url = self.read_url = url
        self.origin = origin_of(url)  # the only origin its credentials go to
        self.client = client
        self.options = options
        self.policy = policy
        self.location = location
        self.stats = SourceStats()
        self.size = 0
        self.etag: str | None = None
        self.last_modified: str | None = None

    # -- the version ---------------------------------------------------------------------------

    VALIDATORS = ("size", "etag", "last_modified")

    def pinned(self) -> dict[str, Any]:
        """What names the version opened (no secrets: a URL is kept only where it differs from the
        one given, and then names a version, not a grant)."""
        state = {name: getattr(self, name) for name in self.VALIDATORS} | self.policy.pinned()
        if self.resolve_url != self.url:
            state["resolve_url"] = self.resolve_url
        return state

    def restore(self, pinned: Mapping[str, Any] | None) -> None:
        """Take `pinned` as the version opened (None: none yet)."""
        state = pinned or {}
        self.size = state.get("size") or 0
        self.etag, self.last_modified = state.get("etag"), state.get("last_modified")
        self.policy.restore(pinned)
        self.resolve_url = self.read_url = state.get("resolve_url") or self.url

    async def still(self, pinned: Mapping[str, Any]) -> bool:
        """Take `pinned` as the version opened if the object still is that version (one request,
        retried as every request is); else forget it."""
        self.restore(pinned)
        if await self.retrying(self.revalidate_once):
            return True
        self.restore(None)
        return False

    async def revalidate_once(self) -> bool:
        """True if the object is still the version opened: the store's own question, else a
        conditional HEAD of `url` (304 where ETags allow). One attempt."""
        answer = await self.policy.revalidate(self)
        if answer is not None:
            return answer
        headers = {"If-None-Match": self.etag} if self.etag else {}
        response = await self.send(self.request("HEAD", headers, self.url), "revalidate")
        await response.aclose()
        if response.status_code == 304:
            return True
        if response.status_code != 200:
            return False
        same_etag = response.headers.get("etag") == self.etag
        same_size = response.headers.get("content-length") in (None, str(self.size))
        return same_etag and same_size and response.headers.get("last-modified") == self.last_modified

    def remember(self, response: httpx.Response) -> None:
        """The open's answer names the version: its validators, and where reads of it go."""
        self.etag = response.headers.get("etag")
        self.last_modified = response.headers.get("last-modified")
        pinned = self.policy.remember(response, self)
        if pinned is not None:
            self.resolve_url = pinned
            if not response.history:  # answered by the origin itself: later reads ask the pinned URL
                self.read_url = pinned

    def pin(self) -> dict[str, str]:
        """Headers that make the server refuse (412) if the object is not the one opened."""
        if self.policy.pinned_by_url(self):
            return {}
        if self.etag and not self.etag.startswith("W/"):
            return {"If-Match": self.etag}
        if self.last_modified and not self.etag:
            return {"If-Unmodified-Since": self.last_modified}
        return {}

    # -- requests ------------------------------------------------------------------------------

    def request(self, method: str, headers: Mapping[str, str], url: str | None = None) -> httpx.Request:
        """A request to `url` (default: where reads go); the origin's credentials only to the origin."""
        all_headers = {"Accept-Encoding": "identity", **self.options.headers, **headers}
        request = self.client.build_request(method, url or self.read_url, headers=all_headers)
        if not keeps_credentials(request.url, self.origin):
            without_credentials(request.headers)
        return request

    def range_request(self, start: int, end: int) -> httpx.Request:
        """A GET of bytes [start, end) of the version opened."""
        return self.request("GET", {"Range": f"bytes={start}-{end - 1}", **self.pin()})

    async def send(
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

    async def retrying(self, attempt_once: Callable[[], Awaitable[T]]) -> T:
        return await retrying(attempt_once, self.options, self.location)

    def body(self, response: httpx.Response, purpose: str) -> Body:
        return Body(response, functools.partial(self.stats.add_bytes, purpose), self.location)

    async def whole_body(self, response: httpx.Response, purpose: str) -> bytes:
        """A 200 where a range was asked: fine for small objects, refused for big ones."""
        cap = self.options.full_body_cap
        body = self.body(response, purpose)
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

    # -- answers -------------------------------------------------------------------------------

    def check_same_object(self, response: httpx.Response, whole_size: int | None) -> None:
        etag = response.headers.get("etag")
        if self.etag and etag and etag != self.etag:
            raise SourceChanged(f"{self.location} changed: ETag {self.etag} is now {etag}")
        if whole_size is not None and whole_size != self.size:
            raise SourceChanged(f"{self.location} changed: {self.size} bytes are now {whole_size}")
        self.policy.check_same(response, self)

    def content_range(self, response: httpx.Response) -> ContentRange:
        """A 206's Content-Range: a range of the object opened (SourceChanged: of another size)."""
        header = response.headers.get("content-range", "")
        found = parse_content_range(header)
        if found is None or found.first is None or found.total is None:
            raise SourceError(f"{self.location}: 206 with unusable Content-Range {header!r}")
        if not found.satisfied:
            raise SourceError(f"{self.location}: impossible Content-Range {header!r}")
        if self.size and found.total != self.size:
            raise SourceChanged(f"{self.location} changed: {self.size} bytes are now {found.total}")
        return found

    def check_partial(self, response: httpx.Response, start: int, end: int) -> None:
        """A 206 of the object opened, with exactly bytes [start, end) to come."""
        self.check_status(response, allow=(206,))
        self.check_same_object(response, None)
        got = self.content_range(response)
        if (got.first, got.last) != (start, end - 1):
            raise SourceError(
                f"{self.location}: asked for bytes {start}-{end - 1}, server sent {got.first}-{got.last}"
            )
        length = response.headers.get("content-length")
        if length is not None and length != str(end - start):
            raise SourceError(
                f"{self.location}: Content-Length {length} does not match range {start}-{end - 1}"
            )

    def check_status(self, response: httpx.Response, allow: tuple[int, ...]) -> None:
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
            now = parse_content_range(response.headers.get("content-range"))
            total = now.total if now is not None and now.first is None else None  # `bytes */total`
            if total is not None and self.size and total != self.size:
                raise SourceChanged(f"{self.location} changed: now {total} bytes")
        redirected = origin_of(response.url) != self.origin
        if status in EXPIRED_STATUS and redirected and not response.history:
            # straight to a redirect target remembered from an earlier answer: its signature may
            # have expired, so resolve again from the origin (a fresh one refusing is final, below)
            self.read_url = self.resolve_url
            raise Retry(f"HTTP {status} from the redirect target {response.url.host}; resolving again", 0.0)
        generic = f"HTTP {status} ({self.reason(response)})"
        raise SourceError(f"{self.location}: {self.policy.explain(response, self, generic)}")

    def reason(self, response: httpx.Response) -> str:
        """What a final error status means, for the message."""
        status = response.status_code
        reason = REASONS.get(status, "unexpected status")
        if origin_of(response.url) != self.origin:
            kind = "refused or expired signature" if status in EXPIRED_STATUS else reason
            return f"{kind}, from the redirect target {response.url.host}"
        return reason


def _failed_host(error: httpx.TransportError) -> str | None:
    try:
        return error.request.url.host
    except RuntimeError:  # no request attached
        return None
