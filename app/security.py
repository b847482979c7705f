"""Bearer-token check for everything but /healthz, as a plain ASGI middleware (streams untouched)."""

from __future__ import annotations

import hmac

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
