"""The exported program's graph: GET .../graph and GET .../tensors/{name}/consumers.

The program (models/<model>.json) is read from the archive on the first request for it and
kept with the opened archive; the listing and tensor routes never read it. Declared once by
`build`, mounted for the default archive and per archive like the tensor routes.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated

import msgspec
from fastapi import APIRouter, Depends
from starlette.responses import Response

from ..errors import json_response
from ..registry import Served
from .params import ModelQ


def build(resolve: Callable[..., Awaitable[Served]], where: str) -> APIRouter:
    router = APIRouter()
    ServedArchive = Annotated[Served, Depends(resolve)]  # noqa: N806 - a type alias

    @router.get(
        "/graph",
        summary=f"The exported program's graph ({where}): nodes in order, signature, modules, consumers",
    )
    async def program_graph(served: ServedArchive, model: ModelQ = None) -> Response:
        graph = await served.archive.graph(model)
        return json_response({"archive": served.id, **graph.to_dict()})

    @router.get(
        "/tensors/{name:path}/consumers",
        summary=f"The graph nodes reading a tensor or a tied alias of it ({where})",
    )
    async def tensor_consumers(served: ServedArchive, name: str, model: ModelQ = None) -> Response:
        return json_response(msgspec.to_builtins(await served.archive.consumers(name, model)))

    return router
