"""GET /tensors/{name}/stats: value statistics for the viewer (see app/stats.py for what is computed).

Exact for small tensors; from a bounded, documented sample for large ones (`sampled: true`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from ..errors import json_response
from ..stats import tensor_stats

router = APIRouter()

ModelQ = Annotated[str | None, Query(description="model name (default: the only model, else 'model')")]


async def _stats(request: Request, archive_id: str | None, name: str, model: str | None) -> Response:
    archive = await request.app.state.registry.get(archive_id)
    return json_response(await tensor_stats(archive, name, model))


@router.get("/tensors/{name:path}/stats", summary="A tensor's value statistics (default archive)")
async def tensor_stats_default(request: Request, name: str, model: ModelQ = None):
    return await _stats(request, None, name, model)


@router.get("/archives/{archive_id}/tensors/{name:path}/stats", summary="A tensor's value statistics")
async def archive_tensor_stats(request: Request, archive_id: str, name: str, model: ModelQ = None):
    return await _stats(request, archive_id, name, model)
