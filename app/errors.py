"""Every error is JSON `{"error": {"code", "message"}}` with the right status; never a traceback."""

from __future__ import annotations

import logging

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

import reader

from .registry import ArchiveNotFound, ArchiveUnavailable, Served, VersionNotServed
from .versioning import REVALIDATE, PinRedirect, pinned_url

log = logging.getLogger("pt2serve")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


def json_response(content: object, status: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code=status, media_type="application/json")


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    body = orjson.dumps({"error": {"code": code, "message": message}})
    return Response(body, status_code=status, media_type="application/json", headers=headers)


# reader errors → (status, code); order matters: subclasses first
READER_ERRORS: list[tuple[type[Exception], int, str]] = [
    (reader.TensorNotFound, 404, "tensor_not_found"),
    (reader.ModelNotFound, 404, "model_not_found"),
    (reader.FileNotFound, 404, "file_not_found"),
    (reader.UnsupportedPayload, 422, "unsupported_payload"),
    (reader.SourceChanged, 503, "archive_changed"),
    (reader.SourceError, 502, "upstream_error"),
    (reader.IntegrityError, 502, "integrity_error"),
    (reader.ArchiveFormatError, 502, "archive_format_error"),
]


def version_error(request: Request, exc: VersionNotServed) -> Response:
    """404 (never this archive's) or 410 (replaced), naming the current version and its URL;
    not cacheable, since another replica may already serve a version this one does not."""
    error: dict[str, object] = {
        "code": "version_gone" if exc.gone else "version_not_found",
        "message": str(exc),
        "current_version": exc.current,
    }
    if exc.current is not None:
        error["current_url"] = pinned_url(request, exc.archive_id, exc.current)
    return Response(
        orjson.dumps({"error": error}),
        status_code=410 if exc.gone else 404,
        media_type="application/json",
        headers={"cache-control": REVALIDATE},
    )


REPLAYED = "pt2serve.replayed"


async def _after_change(request: Request, served: Served) -> Response | None:
    """The archive changed under a request, before its first byte went out. Index the new version;
    then a URL pinned to the old version gets 410 naming the new one, and an unversioned request is
    answered again, once, from the new version (a 503 would make a proxy such as nginx mark the
    replica down, and every replica meets the change once per update)."""
    registry = request.app.state.registry
    await registry.reopen(served.id, stale=served.archive)  # no-op if another request did it
    current = registry.slot(served.id).version
    if served.pinned and served.version != current:
        await registry.retire(served.id, served.version)  # its object is gone: no grace to give
        return version_error(request, VersionNotServed(served.id, served.version, current, True))
    if not served.pinned and current is not None and not request.scope.get(REPLAYED):
        return _Replay(request.app, {**request.scope, REPLAYED: True, "state": {}})
    return None


class _Replay(Response):
    """Runs the app again for the same (bodiless GET/HEAD) request."""

    def __init__(self, app: ASGIApp, scope: Scope) -> None:
        super().__init__()
        self.app, self.replay_scope = app, scope

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(self.replay_scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(reader.ReaderError)
    async def reader_error(request: Request, exc: reader.ReaderError) -> Response:
        for kind, status, code in READER_ERRORS:
            if isinstance(exc, kind):
                headers = {"retry-after": "1"} if status == 503 else None
                served = getattr(request.state, "served", None)
                if isinstance(exc, reader.SourceChanged) and served is not None:
                    answer = await _after_change(request, served)
                    if answer is not None:
                        return answer
                return error_response(status, code, str(exc), headers)
        return error_response(500, "reader_error", str(exc))

    @app.exception_handler(ArchiveNotFound)
    async def no_archive(request: Request, exc: ArchiveNotFound) -> Response:
        return error_response(404, "archive_not_found", str(exc))

    @app.exception_handler(VersionNotServed)
    async def no_version(request: Request, exc: VersionNotServed) -> Response:
        return version_error(request, exc)

    @app.exception_handler(PinRedirect)
    async def pin_redirect(request: Request, exc: PinRedirect) -> Response:
        return Response(status_code=307, headers={"location": exc.location, "cache-control": REVALIDATE})

    @app.exception_handler(ArchiveUnavailable)
    async def unavailable(request: Request, exc: ArchiveUnavailable) -> Response:
        return error_response(503, "archive_unavailable", str(exc), {"retry-after": "5"})

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return error_response(422, "invalid_request", details or "invalid request")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), getattr(exc, "headers", None))

    # Anything else is a bug of ours, never the client's fault: logged, and a JSON 500.
    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error on %s", request.url.path)
        return error_response(500, "internal_error", "internal error (see the server log)")
