"""Access control: a bearer token for everything but /healthz (a plain ASGI middleware, streams
untouched), CORS with JSON refusals, and no secrets in logs."""

from __future__ import annotations

import hmac
import logging

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import error_response

OPEN_PATHS = {"/healthz"}


class BearerTokenMiddleware:
    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"authorization", b"")
        if not hmac.compare_digest(given, self.expected):
            message = "missing bearer token" if not given else "wrong bearer token"
            response = error_response(401, "unauthorized", message, {"www-authenticate": "Bearer"})
            await response(scope, receive, send)
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
