"""Service routes: health, metrics and the archive list."""

from __future__ import annotations

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from ..errors import json_response

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
    return json_response(
        {"default": registry.default_id, "archives": [slot.describe() for slot in registry.slots.values()]}
    )
