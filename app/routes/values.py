"""GET .../tensors/{name}/stats: value statistics for the viewer (app/values.py says what is computed).

Exact for small tensors; from a bounded, documented sample for large ones (`sampled: true`).
Declared once by `build`, mounted beside the tensor routes.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from ..openapi import ARCHIVE, TENSOR, answers, json_resource
from ..registry import Served
from ..values import tensor_stats
from ..versioning import caching_headers, json_etag_response
from .params import ModelQ


def build(resolve: Callable[..., Awaitable[Served]], where: str) -> APIRouter:
    router = APIRouter()
    ServedArchive = Annotated[Served, Depends(resolve)]  # noqa: N806 - a type alias

    @router.get(
        "/tensors/{name:path}/stats",
        summary=f"A tensor's value statistics ({where})",
        responses=answers(ARCHIVE, TENSOR, json_resource("the tensor's value statistics")),
    )
    async def tensor_values(
        request: Request, served: ServedArchive, name: str, model: ModelQ = None
    ) -> Response:
        headers = caching_headers(request, served)
        return json_etag_response(request, await tensor_stats(served.archive, name, model), headers)

    return router
