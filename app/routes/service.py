"""Service routes: health, metrics and the archive list."""

from __future__ import annotations

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from ..errors import error_response, json_response

router = APIRouter()


@router.get(
    "/healthz",
    summary="Readiness and liveness: 503 until every archive has opened once, then 200",
    responses={503: {"description": "An archive has not opened yet (or failed to, and is retried)"}},
)
async def healthz(request: Request):
    state = request.app.state
    slots = state.registry.slots
    archives = {archive_id: s.status for archive_id, s in slots.items()}
    if not getattr(state, "ready", False):
        # A load balancer (Kubernetes' readiness probe) sends traffic only once every archive is open
        # (or, with PT2SERVE_LAZY, waits to be opened on first use). Once ready, a replica stays ready:
        # a reopen after an update, or a failed revalidation, is the same on every replica, and taking
        # them all out of rotation would turn it into an outage.
        waiting = "pending" if state.settings.lazy else None
        waiting_for = [f"{i} ({status})" for i, status in archives.items() if status not in ("open", waiting)]
        if waiting_for:
            message = f"not ready: archives not open yet: {', '.join(waiting_for)}"
            return error_response(503, "not_ready", message, headers={"Retry-After": "5"})
        state.ready = True
    return json_response({"status": "ok", "archives": archives})


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request):
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/archives", summary="The configured archives and their status")
async def archives(request: Request):
    registry = request.app.state.registry
    return json_response(
        {"default": registry.default_id, "archives": [slot.describe() for slot in registry.slots.values()]}
    )
