"""Access control: a bearer token for everything but /healthz and the viewer's page shell (a plain
ASGI middleware, streams untouched), or a short-lived signed URL for GET/HEAD (app/signing.py); the
same check answers an edge proxy's `GET /auth`. CORS with JSON refusals, and no secrets in logs.

`RequestGuard`, outside all of them, refuses what no rule should have to guess about (two
`Authorization` or `Host` fields: 400) and, on a token-less service, a foreign `Host` on loopback
(421, app/hosts.py)."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .caching import NO_STORE, NOSNIFF
from .errors import error_response
from .hosts import HostRule
from .signing import SignatureRefused, UrlSigner

# The page shell holds no data: it asks for the token itself, then sends it on every API call.
# /auth checks the credentials of another request (the one an edge proxy asks about) itself.
OPEN_PATHS = {"/healthz", "/", "/favicon.ico", "/auth"}
OPEN_PREFIXES = ("/viewer/",)


def is_open(path: str) -> bool:
    if path in OPEN_PATHS:
        return True
    return path.startswith(OPEN_PREFIXES) and not ({"..", "."} & set(path.split("/")) or "//" in path)


class AccessGate:
    """Who may GET what: the bearer token, or a valid unexpired signed URL for GET and HEAD. One
    copy of the rule for the middleware and for the auth check an edge proxy asks (`GET /auth`)."""

    def __init__(self, token: str, signer: UrlSigner | None = None) -> None:
        self.expected = f"Bearer {token}".encode()
        self.signer = signer

    def holds_token(self, authorization: bytes) -> bool:
        """Whether `authorization` (an Authorization field's value) is the bearer token."""
        return hmac.compare_digest(authorization, self.expected)

    def refusal(self, method: str, path: str, query: str, authorization: bytes) -> Response | None:
        """None if the request may pass; else the 401 or 403 to answer. `path` is decoded."""
        if is_open(path) or method == "OPTIONS":
            return None
        if not authorization and self.signer is not None and "sig=" in query:
            try:
                if method not in ("GET", "HEAD"):
                    raise SignatureRefused("bad_signature", "a signed URL allows GET and HEAD only")
                self.signer.verify(path, query)
            except SignatureRefused as refused:
                return error_response(403, refused.code, refused.message, {"cache-control": NO_STORE})
            return None
        if not self.holds_token(authorization):
            message = "missing bearer token" if not authorization else "wrong bearer token"
            refused = {"www-authenticate": "Bearer", "cache-control": NO_STORE}
            return error_response(401, "unauthorized", message, refused)
        return None


class BearerTokenMiddleware:
    def __init__(self, app: ASGIApp, gate: AccessGate) -> None:
        self.app = app
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self.gate.refusal(
                scope["method"],
                scope["path"],
                scope.get("query_string", b"").decode("latin-1"),
                dict(scope["headers"]).get(b"authorization", b""),
            )
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


NO_STORE_FIELDS = {"cache-control": NO_STORE}
HOST_REFUSED = (
    "this service answers on loopback only for loopback host names (localhost, *.localhost, 127.0.0.1, "
    "[::1]) and those --allowed-host names"
)


class RequestGuard:
    """ASGI middleware (outside CORS and the token check): one `Authorization` and one `Host` at
    most (a proxy and the service could each read another one), and a token-less service's loopback
    answers only for the names `hosts` admits."""

    def __init__(self, app: ASGIApp, hosts: HostRule | None) -> None:
        self.app = app
        self.hosts = hosts  # None: every Host (the service has a token)

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        """A plain function handing on the next layer's awaitable: no coroutine of its own (every
        request passes here, the hot lane's too)."""
        if scope["type"] != "http":
            return self.app(scope, receive, send)
        host = None
        more = False  # a second Host or Authorization field
        authorized = False
        for name, value in scope["headers"]:
            if name == b"host":
                more = more or host is not None
                host = value
            elif name == b"authorization":
                more = more or authorized
                authorized = True
        if more:
            message = "the request has more than one Authorization or Host field"
            return error_response(400, "ambiguous_request", message, NO_STORE_FIELDS)(scope, receive, send)
        if self.hosts is not None and not self.hosts.admits(scope, host):
            return error_response(421, "host_refused", HOST_REFUSED, NO_STORE_FIELDS)(scope, receive, send)
        return self.app(scope, receive, send)


class JsonCORSMiddleware(CORSMiddleware):
    """Starlette's CORS handling, with refused preflights answered in the service's JSON error shape."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code != 400:
            response.headers.update(NOSNIFF)
            return response
        keep = {k: v for k, v in response.headers.items() if k not in ("content-type", "content-length")}
        return error_response(400, "cors_refused", bytes(response.body).decode(), keep)


def quiet_url_logging() -> None:
    """httpx logs every request URL at INFO, presigned signatures included: keep it to warnings."""
    logging.getLogger("httpx").setLevel(logging.WARNING)
