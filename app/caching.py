"""The caching policy of every route, in one place (docs/edge-delivery.md, "What every route answers").

- a versioned URL (`/archives/{id}@{version}/...`): the same bytes forever, `IMMUTABLE`;
- unversioned JSON and HTML, the viewer's files: `no-cache` with a strong ETag, 304 on a match;
- health, metrics, signing, the auth check and the API docs: `no-store`;
- a response to a request that carried credentials (an Authorization header or a signed URL) is
  never `public`: shared caches must not hand it to others (RFC 9111 §3.5); `private` instead;
- every answer says `X-Content-Type-Options: nosniff` (a body is what its Content-Type says: a
  tensor's bytes or a name in JSON are never taken for a script or a page): a constant field of
  the hot lane's headers and of every error, added here to every other answer;
- an unversioned answer from a version opened stale (its origin could not be reached: docs/cache.md,
  stale-if-error) says so in `X-Pt2serve-Stale: <version>; age=<seconds>` and is `no-cache` as every
  unversioned answer is, never `immutable`.

Routes that know more (versioned or not) say so through app/versioning.py's `caching_headers`;
`CachePolicy`, the middleware just outside the routes, gives every other response the default of
its path and turns `public` into `private` for credentialed requests. The hot lane (layouts and
tensor bytes) answers outside it and applies the same rule through `caching_headers`.
"""

from __future__ import annotations

import email.utils
from collections.abc import Awaitable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import encoding
from .fields import Fields
from .httpranges import matches_weakly

IMMUTABLE = "public, max-age=31536000, immutable"
IMMUTABLE_PRIVATE = "private, max-age=31536000, immutable"
REVALIDATE = "no-cache"
NO_STORE = "no-store"
REVALIDATE_HEADERS = Fields({"cache-control": REVALIDATE})
STALE_HEADER = "x-pt2serve-stale"
NOSNIFF = {"x-content-type-options": "nosniff"}
_NOSNIFF = (b"x-content-type-options", b"nosniff")

# paths whose answers no cache may keep: they describe this moment or this request
NO_STORE_PATHS = frozenset(
    {"/healthz", "/metrics", "/sign", "/auth", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}
)


def credentialed(scope: Scope) -> bool:
    """Whether the request carried credentials: a signed URL, or an Authorization header."""
    if b"sig=" in scope["query_string"]:
        return True
    return any(name == b"authorization" for name, _ in scope["headers"])


def pair_policy(both_pinned: bool, scope: Scope) -> Fields:
    """An answer about two archive versions at once (a comparison): immutable only when both URLs
    named their versions, else revalidated (either side may move on)."""
    if both_pinned:
        return Fields({"cache-control": IMMUTABLE_PRIVATE if credentialed(scope) else IMMUTABLE})
    return REVALIDATE_HEADERS


def stale_value(version: str, age: float) -> str:
    """`X-Pt2serve-Stale`: the version served though its origin could not be asked, and how long
    ago the origin last said it was current."""
    return f"{version}; age={int(age)}"


def default_policy(path: str) -> str:
    return NO_STORE if path in NO_STORE_PATHS else REVALIDATE


def private(cache_control: bytes) -> bytes:
    """`cache_control` as a shared cache must read it for a credentialed request."""
    return cache_control.replace(b"public", b"private")


class CachePolicy:
    """ASGI middleware: a response without Cache-Control gets its path's default; a credentialed
    request's `public` becomes `private`; one without `nosniff` gets it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        default = default_policy(scope["path"]).encode()
        keep_private = credentialed(scope)

        def sending(message: Message) -> Awaitable[None]:
            if message["type"] == "http.response.start":
                message["headers"] = _governed(message.get("headers", ()), default, keep_private)
            return send(message)

        await self.app(scope, receive, sending)


def _governed(headers: Any, default: bytes, keep_private: bool) -> list[tuple[bytes, bytes]]:
    fields = list(headers)
    cached = sniffed = False
    for index, (name, value) in enumerate(fields):
        if name == b"cache-control":
            cached = True
            if keep_private:
                fields[index] = (name, private(value))
        elif name == b"x-content-type-options":
            sniffed = True
    if not cached:
        fields.append((b"cache-control", default))
    if not sniffed:
        fields.append(_NOSNIFF)
    return fields


# -- conditional requests and content codings for whole text bodies -----------------------------


def not_modified(request: Request, etag: str, last_modified: float | None = None) -> bool:
    """RFC 9110 §13.2.2: If-None-Match (weak comparison) decides when present; else
    If-Modified-Since against `last_modified` (seconds since the epoch), when there is one."""
    headers = request.headers
    if_none_match = headers.get("if-none-match")
    if if_none_match is not None:
        return matches_weakly(if_none_match, etag)
    if last_modified is None:  # the usual JSON answer: one header lookup, not two (the hot layout)
        return False
    since = headers.get("if-modified-since")
    if since is None:
        return False
    try:
        when = email.utils.parsedate_to_datetime(since)
    except (TypeError, ValueError):
        return False
    return when is not None and int(last_modified) <= when.timestamp()


def text_response(
    request: Request,
    body: bytes,
    etag: str,
    media_type: str,
    headers: Mapping[str, str],
    *,
    encoded: dict[str, bytes] | None = None,
    last_modified: float | None = None,
) -> Response:
    """A whole text body (JSON, HTML, JS, CSS) in the coding the client prefers, with that
    coding's ETag, `Vary: Accept-Encoding` when it could have been encoded, Last-Modified when
    given, and a 304 when the client's validator matches. `encoded` memoizes the encoded bodies
    (a dict kept with a body that is sent again)."""
    fields = dict(headers)
    coding = encoding.IDENTITY
    if len(body) >= encoding.MIN_SIZE:
        coding = encoding.choose(request.headers.get("accept-encoding"))
        fields["vary"] = "Accept-Encoding"
        etag = encoding.tagged(etag, coding)
    fields["etag"] = etag
    if last_modified is not None:
        fields["last-modified"] = email.utils.formatdate(last_modified, usegmt=True)
    if not_modified(request, etag, last_modified):
        return Response(status_code=304, headers=fields)
    if coding != encoding.IDENTITY:
        fields["content-encoding"] = coding
        known = encoded.get(coding) if encoded is not None else None
        if known is None:
            known = encoding.compress(body, coding)
            if encoded is not None:
                encoded[coding] = known
        body = known
    return Response(body, media_type=media_type, headers=fields)
