"""Service routes: health, metrics, the archive list, and the auth check an edge proxy asks."""

from __future__ import annotations

from urllib.parse import unquote

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from ..caching import REVALIDATE_HEADERS
from ..errors import json_response
from ..versioning import json_etag_response

router = APIRouter()


@router.get("/healthz", summary="Liveness, and each archive's status")
async def healthz(request: Request):
    slots = request.app.state.registry.slots
    return json_response(
        {"status": "ok", "archives": {archive_id: s.status for archive_id, s in slots.items()}}
    )


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request):
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/archives", summary="The configured archives and their status")
async def archives(request: Request):
    registry = request.app.state.registry
    described = [slot.describe() for slot in registry.slots.values()]
    content = {"default": registry.default_id, "archives": described}
    return json_etag_response(request, content, REVALIDATE_HEADERS)


@router.get("/auth", include_in_schema=False)
async def auth(request: Request) -> Response:
    """nginx's `auth_request` (deploy/nginx.conf): may the request in X-Original-URI and
    X-Original-Method, with this request's Authorization, pass? 204 if so; else the 401 or 403
    the service itself would answer. Lets the edge serve cached bytes to authorized clients only."""
    gate = request.app.state.gate
    if gate is None:
        return Response(status_code=204)
    path, _, query = request.headers.get("x-original-uri", "").partition("?")
    refusal = gate.refusal(
        request.headers.get("x-original-method", "GET"),
        unquote(path),
        query,
        request.headers.get("authorization", "").encode("latin-1"),
    )
    return refusal if refusal is not None else Response(status_code=204)
