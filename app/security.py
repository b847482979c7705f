"""Access control: a bearer token for everything but /healthz and the viewer's page shell (a plain
ASGI middleware, streams untouched), or a short-lived signed URL for GET/HEAD (app/signing.py);
CORS with JSON refusals, and no secrets in logs."""

from __future__ import annotations

import hmac
import logging

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import error_response
from .signing import SignatureRefused, UrlSigner

# The page shell holds no data: it asks for the token itself, then sends it on every API call.
OPEN_PATHS = {"/healthz", "/", "/favicon.ico"}
OPEN_PREFIXES = ("/viewer/",)


def is_open(path: str) -> bool:
    if path in OPEN_PATHS:
        return True
    return path.startswith(OPEN_PREFIXES) and not ({"..", "."} & set(path.split("/")) or "//" in path)


class BearerTokenMiddleware:
    def __init__(self, app: ASGIApp, token: str, signer: UrlSigner | None = None) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()
        self.signer = signer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_open(scope["path"]) or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"authorization", b"")
        query = scope.get("query_string", b"").decode("latin-1")
        if not given and self.signer is not None and "sig=" in query:
            await self._signed(scope, receive, send, query)
            return
        if not hmac.compare_digest(given, self.expected):
            message = "missing bearer token" if not given else "wrong bearer token"
            response = error_response(401, "unauthorized", message, {"www-authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _signed(self, scope: Scope, receive: Receive, send: Send, query: str) -> None:
        assert self.signer is not None
        try:
            if scope["method"] not in ("GET", "HEAD"):
                raise SignatureRefused("bad_signature", "a signed URL allows GET and HEAD only")
            self.signer.verify(scope["path"], query)
        except SignatureRefused as refused:
            await error_response(403, refused.code, refused.message)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class JsonCORSMiddleware(CORSMiddleware):
    """Starlette's CORS handling, with refused preflights answered in the service's JSON error shape."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code != 400:
            return response
        keep = {k: v for k, v in response.headers.items() if k not in ("content-type", "content-length")}
        return error_response(400, "cors_refused", bytes(response.body).decode(), keep)


def quiet_url_logging() -> None:
    """httpx logs every request URL at INFO, presigned signatures included: keep it to warnings."""
    logging.getLogger("httpx").setLevel(logging.WARNING)
