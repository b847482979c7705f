"""Every error is JSON `{"error": {"code", "message"}}` with the right status; never a traceback."""

from __future__ import annotations

import logging
from typing import NamedTuple

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

import reader
from reader.sources import redact_location

from .caching import NOSNIFF
from .open_failures import public_failure
from .registry import ArchiveNotFound, ArchiveUnavailable, Served, VersionNotServed
from .routing import allowed_methods
from .versioning import REVALIDATE, PinRedirect, pinned_url

log = logging.getLogger("pt2serve")


class ErrorCode(NamedTuple):
    status: int | None  # None: whatever status the HTTP layer chose (`http_error`)
    meaning: str


# Every `error.code` the service answers, its status and what it means: the one list the OpenAPI
# document's `Error` schema takes its enum from (app/openapi.py), and tests/test_openapi_routes.py
# holds every error body to.
ERROR_CODES: dict[str, ErrorCode] = {
    "cors_refused": ErrorCode(400, "a CORS preflight from an origin, method or header not allowed"),
    "bad_slice": ErrorCode(
        400, "`slice` is not NumPy basic indexing (ints, start:stop:step, one ..., step not 0)"
    ),
    "ambiguous_request": ErrorCode(400, "the request has two Authorization (or Host) fields"),
    "unauthorized": ErrorCode(401, "the bearer token is missing or wrong"),
    "bad_signature": ErrorCode(403, "the signed URL does not match its signature, or is not a GET/HEAD"),
    "signature_expired": ErrorCode(403, "the signed URL has expired"),
    "open_refused": ErrorCode(403, "--allow-open does not allow the location (the message names the rule)"),
    "opening_disabled": ErrorCode(404, "the service runs without --allow-open: nothing can be opened"),
    "not_found": ErrorCode(404, "no route, or no such file of the viewer"),
    "archive_not_found": ErrorCode(404, "no archive with this id is configured"),
    "version_not_found": ErrorCode(
        404, "the archive never had this version (`current_version`: the one served)"
    ),
    "tensor_not_found": ErrorCode(404, "no tensor of this name in the model"),
    # 404, not 400: the text is valid (the documented pattern accepts it) and names a part of the
    # tensor that is not there, as a tensor name that is not there is 404 (and a version may have it)
    "slice_out_of_range": ErrorCode(
        404, "`slice` indexes past the tensor's sizes or has more indices than dims"
    ),
    "model_not_found": ErrorCode(404, "no model of this name in the archive"),
    "file_not_found": ErrorCode(404, "no such file in the archive"),
    "signing_disabled": ErrorCode(404, "the service has no API token or signing key: URLs need no signature"),
    "method_not_allowed": ErrorCode(405, "the path has no such method (`Allow` lists those it has)"),
    "not_acceptable": ErrorCode(406, "the Accept header excludes the resource's media type"),
    "version_gone": ErrorCode(410, "the archive version was replaced (`current_version`, `current_url`)"),
    "body_too_large": ErrorCode(413, "the request's body is longer than its route takes"),
    "range_not_satisfiable": ErrorCode(416, "no requested range overlaps the body"),
    "host_refused": ErrorCode(
        421, "a token-less service on loopback answers loopback host names and --allowed-host ones only"
    ),
    "invalid_request": ErrorCode(422, "a parameter is missing, repeated, malformed or out of range"),
    "bad_location": ErrorCode(422, "the location to open is malformed (an unknown scheme, a bad hf:// ...)"),
    "too_many_opens": ErrorCode(429, "this client opened too many locations lately (`Retry-After`)"),
    "bad_url": ErrorCode(422, "the path to sign is not a path of this service"),
    "unsupported_payload": ErrorCode(422, "the tensor cannot be served in this form (the message says why)"),
    "header_too_large": ErrorCode(431, "the request line and header fields are longer than the cap"),
    "reader_error": ErrorCode(500, "the archive reader failed in a way not classified"),
    "internal_error": ErrorCode(500, "a bug of the service (see its log)"),
    "upstream_error": ErrorCode(502, "the archive's storage failed or could not be reached"),
    "integrity_error": ErrorCode(502, "bytes read from the archive failed their CRC or length check"),
    "archive_format_error": ErrorCode(502, "the archive is not a valid .pt2 file"),
    "archive_changed": ErrorCode(503, "the archive changed under the request; retry"),
    "archive_unavailable": ErrorCode(503, "the archive has not opened (or failed to, and is retried)"),
    "too_many_streams": ErrorCode(503, "too many concurrent streams; retry"),
    "opens_busy": ErrorCode(503, "too many opens in progress; retry"),
    "not_ready": ErrorCode(503, "not every archive has opened yet"),
    "http_error": ErrorCode(None, "another HTTP-level refusal"),
}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


def json_response(content: object, status: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code=status, media_type="application/json")


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    body = orjson.dumps({"error": {"code": code, "message": message}})
    fields = {**NOSNIFF, **headers} if headers else NOSNIFF
    return Response(body, status_code=status, media_type="application/json", headers=fields)


# reader errors → their code (its status is ERROR_CODES'); order matters: subclasses first
READER_ERRORS: list[tuple[type[Exception], str]] = [
    (reader.TensorNotFound, "tensor_not_found"),
    (reader.ModelNotFound, "model_not_found"),
    (reader.FileNotFound, "file_not_found"),
    (reader.UnsupportedPayload, "unsupported_payload"),
    (reader.SourceChanged, "archive_changed"),
    (reader.SourceError, "upstream_error"),
    (reader.IntegrityError, "integrity_error"),
    (reader.ArchiveFormatError, "archive_format_error"),
]


def opened_failure(exc: reader.ReaderError, location: str) -> ApiError:
    """The answer to a client whose opened location failed with `exc` (app/open_failures.py says
    what it may be told); the details go to the log."""
    log.warning("opened location %s failed: %s: %s", location, type(exc).__name__, exc)
    code, message = public_failure(exc)
    return ApiError(ERROR_CODES[code].status or 502, code, message)


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
        headers={"cache-control": REVALIDATE, **NOSNIFF},
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


def _opened_location(request: Request, served: Served | None) -> str | None:
    """The location (credentials redacted) of the archive a request read, if a client opened it."""
    slot = request.app.state.registry.slots.get(served.id) if served is not None else None
    return redact_location(slot.spec.location) if slot is not None and slot.opened else None


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(reader.ReaderError)
    async def reader_error(request: Request, exc: reader.ReaderError) -> Response:
        for kind, code in READER_ERRORS:
            if isinstance(exc, kind):
                status = ERROR_CODES[code].status or 500
                headers = {"retry-after": "1"} if status == 503 else None
                served = getattr(request.state, "served", None)
                if isinstance(exc, reader.SourceChanged) and served is not None:
                    answer = await _after_change(request, served)
                    if answer is not None:
                        return answer
                opened = _opened_location(request, served)
                if isinstance(exc, reader.SourceError) and opened is not None:
                    failure = opened_failure(exc, opened)
                    return error_response(failure.status, failure.code, failure.message, headers)
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
        fields = {"location": exc.location, "cache-control": REVALIDATE, **NOSNIFF}
        return Response(status_code=307, headers=fields)

    @app.exception_handler(ArchiveUnavailable)
    async def unavailable(request: Request, exc: ArchiveUnavailable) -> Response:
        return error_response(503, "archive_unavailable", str(exc), {"retry-after": "5"})

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return error_response(422, "invalid_request", details or "invalid request")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:
            allowed = allowed_methods(request.app, request.scope)
            if request.method == "OPTIONS":
                return Response(status_code=204, headers={"allow": allowed})
            headers = {**{k: v for k, v in (headers or {}).items() if k.lower() != "allow"}, "allow": allowed}
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), headers)

    # Anything else is a bug of ours, never the client's fault: logged, and a JSON 500.
    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error on %s", request.url.path)
        return error_response(500, "internal_error", "internal error (see the server log)")
