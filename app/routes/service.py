"""Service routes: health, metrics, the archive list, and the auth check an edge proxy asks."""

from __future__ import annotations

from urllib.parse import unquote

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from ..caching import REVALIDATE_HEADERS
from ..errors import error_response, json_response
from ..openapi import METRICS, Listing, answers, json_body, json_resource, kind
from ..versioning import json_etag_response

router = APIRouter()


@router.get(
    "/healthz",
    summary="Readiness and liveness: 503 until every archive has opened once, then 200",
    responses=answers(
        kind("not_ready"),
        json_body(
            "every archive has opened once; `status` is `degraded` (still 200) while an archive is "
            "served from a cached version its origin could not confirm; `archives` and `stale` (per "
            "archive) only for token holders when the service has a token"
        ),
    ),
)
async def healthz(request: Request):
    """With a token, a request without it learns the status only: which archives are configured or
    were opened (their ids name the locations clients opened) is for token holders."""
    state = request.app.state
    gate = state.gate
    named = gate is None or gate.holds_token(request.headers.get("authorization", "").encode("latin-1"))
    slots = state.registry.slots
    archives = {archive_id: s.status for archive_id, s in slots.items()}
    if not getattr(state, "ready", False):
        # A load balancer (Kubernetes' readiness probe) sends traffic only once every archive is open
        # (or, with PT2SERVE_LAZY, waits to be opened on first use). Once ready, a replica stays ready:
        # a reopen after an update, or a failed revalidation, is the same on every replica, and taking
        # them all out of rotation would turn it into an outage.
        waiting = "pending" if state.settings.lazy else None
        waiting_for = [
            f"{i} ({slots[i].status})"
            for i in archives
            if slots[i].status not in ("open", waiting) and not slots[i].opened
        ]
        if waiting_for:
            listed = ", ".join(waiting_for) if named else f"{len(waiting_for)}"
            message = f"not ready: archives not open yet: {listed}"
            return error_response(503, "not_ready", message, headers={"Retry-After": "5"})
        state.ready = True
    stale = {archive_id: found for archive_id, s in slots.items() if (found := s.staleness()) is not None}
    if not named:
        return json_response({"status": "degraded" if stale else "ok"})
    if stale:  # serving, from versions the origin could not confirm (docs/cache.md, stale-if-error)
        return json_response({"status": "degraded", "archives": archives, "stale": stale})
    return json_response({"status": "ok", "archives": archives})


@router.get("/metrics", summary="Prometheus metrics", response_class=Response, responses=answers(METRICS))
async def metrics(request: Request):
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get(
    "/archives",
    summary="The archives (configured and opened), their status, and the locations --allow-open allows",
    responses=answers(json_resource("the archives, their versions and status", Listing("/archives", "id"))),
)
async def archives(request: Request):
    registry = request.app.state.registry
    described = [slot.describe() for slot in registry.slots.values()]
    policy = request.app.state.opened.policy
    content = {"default": registry.default_id, "archives": described, "allow_open": list(policy.patterns)}
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
