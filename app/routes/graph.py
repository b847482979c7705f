"""The exported program's graph: GET .../graph and GET .../tensors/{name}/consumers.

The program (models/<model>.json) is read from the archive on the first request for it and
kept with the opened archive; the listing and tensor routes never read it. Declared once by
`build`, mounted for the default archive and per archive like the tensor routes.

The graph of a large model is the largest JSON the service sends (GPT-2's is 184 KB; 10,000
nodes, megabytes): it is serialized and encoded in batches of nodes as it goes out, so its text
is never held whole, and its ETag names the archive version (the bytes are fixed by it), so a
304 costs no serialization.
"""

from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated, Any

import msgspec
import orjson
from fastapi import APIRouter, Depends, Request
from starlette.responses import Response, StreamingResponse

from .. import encoding
from ..caching import not_modified
from ..openapi import ARCHIVE, FILE, MODEL, TENSOR, answers, json_resource
from ..registry import Served
from ..versioning import caching_headers, json_etag_response, version_etag
from .params import ModelQ

NODES_PER_PIECE = 512
GRAPH_FORMAT = "graph-json-1"  # in the ETag: a change to the JSON's shape must change it


def build(resolve: Callable[..., Awaitable[Served]], where: str) -> APIRouter:
    router = APIRouter()
    ServedArchive = Annotated[Served, Depends(resolve)]  # noqa: N806 - a type alias

    @router.get(
        "/graph",
        summary=f"The exported program's graph ({where}): nodes in order, signature, modules, consumers",
        responses=answers(ARCHIVE, MODEL, FILE, json_resource("the graph")),
    )
    async def program_graph(request: Request, served: ServedArchive, model: ModelQ = None) -> Response:
        headers = caching_headers(request, served)
        graph = await served.archive.graph(model=model)
        coding = encoding.choose(request.headers.get("accept-encoding"))
        etag = encoding.tagged(version_etag(served, GRAPH_FORMAT, graph.model), coding)
        fields = {**headers, "etag": etag, "vary": "Accept-Encoding"}
        if not_modified(request, etag):
            return Response(status_code=304, headers=fields)
        if coding != encoding.IDENTITY:
            fields["content-encoding"] = coding
        pieces = encoding.stream(graph_json(served.id, graph.to_dict()), coding)
        return StreamingResponse(pieces, media_type="application/json", headers=fields)

    @router.get(
        "/tensors/{name:path}/consumers",
        summary=f"The graph nodes reading a tensor or a tied alias of it ({where})",
        responses=answers(ARCHIVE, TENSOR, FILE, json_resource("the consuming nodes")),
    )
    async def tensor_consumers(
        request: Request, served: ServedArchive, name: str, model: ModelQ = None
    ) -> Response:
        headers = caching_headers(request, served)
        content = msgspec.to_builtins(await served.archive.consumers(name, model=model))
        return json_etag_response(request, content, headers)

    return router


def graph_json(archive_id: str, graph: dict[str, Any]) -> Iterator[bytes]:
    """`{"archive": ..., **graph}` as JSON text in pieces of NODES_PER_PIECE nodes (nodes last)."""
    nodes = graph.pop("nodes")
    head = orjson.dumps({"archive": archive_id, **graph})
    yield head[:-1] + b',"nodes":['
    for start in range(0, len(nodes), NODES_PER_PIECE):
        piece = orjson.dumps(nodes[start : start + NODES_PER_PIECE])[1:-1]
        yield b"," + piece if start else piece
    yield b"]}"
