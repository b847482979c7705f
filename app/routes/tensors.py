"""Tensor routes: the listing, a layout's JSON and a tensor's bytes (raw or .npy).

`build` declares them once for an archive dependency; app.main mounts them for the
default archive (`/tensors/...`) and per archive (`/archives/{archive_id}/tensors/...`).
"""

import hashlib
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

import reader
from reader.formats.npy import npy_body

from ..errors import ApiError, json_response
from ..registry import Served
from ..responses import BodyResponse
from .params import FormatQ, KindQ, ModelQ, OrderQ, PrefixQ

# Tensor bytes at a URL change only when the archive does, and then the ETag changes too.
CACHE_CONTROL = "public, max-age=86400, immutable"


def etag(archive: reader.Archive, *parts: str) -> str:
    digest = hashlib.blake2b("\0".join((archive.identity, *parts)).encode(), digest_size=16).hexdigest()
    return f'"{digest}"'


def build(resolve: Callable[..., Awaitable[Served]], where: str) -> APIRouter:
    """The tensor routes of the archive `resolve` finds (`where` names it in the docs)."""
    router = APIRouter()
    ServedArchive = Annotated[Served, Depends(resolve)]  # noqa: N806 - a type alias

    @router.get("/tensors", summary=f"List {where}'s tensors")
    async def list_tensors(
        served: ServedArchive, model: ModelQ = None, prefix: PrefixQ = None, kind: KindQ = None
    ) -> Response:
        tensors = served.archive.tensors(model)
        if prefix:
            tensors = [t for t in tensors if t.name.startswith(prefix)]
        if kind:
            tensors = [t for t in tensors if t.kind == kind]
        return json_response(
            {"archive": served.id, "models": served.archive.models, "tensors": [t.to_dict() for t in tensors]}
        )

    @router.get("/tensors/{name:path}/layout", summary=f"A tensor's layout ({where})")
    async def tensor_layout(served: ServedArchive, name: str, model: ModelQ = None) -> Response:
        return json_response(served.archive.layout(name, model).to_dict())

    @router.get("/tensors/{name:path}/data", summary=f"A tensor's bytes ({where})", response_class=Response)
    @router.head(
        "/tensors/{name:path}/data",
        summary=f"A tensor's bytes ({where}, headers only)",
        response_class=Response,
    )
    async def tensor_data(
        request: Request,
        served: ServedArchive,
        name: str,
        model: ModelQ = None,
        order: OrderQ = "default",
        format: FormatQ = "raw",
    ) -> Response:
        if format == "npy":
            tensor = served.archive.tensor(name, model, "contiguous")
            body, media_type = npy_body(tensor), "application/x-npy"
        else:
            tensor = served.archive.tensor(name, model, order)
            body, media_type = tensor, "application/octet-stream"
        check_accept(request, media_type)
        info = tensor.info
        return BodyResponse(
            request,
            body,
            etag=etag(served.archive, info.model, info.name, tensor.order, format),
            media_type=media_type,
            headers={
                "cache-control": CACHE_CONTROL,
                "x-tensor-dtype": info.dtype or "",
                "x-tensor-shape": ",".join(map(str, info.sizes or ())),
                "x-tensor-dim-order": ",".join(map(str, tensor.dim_order)),
            },
            chunk_size=request.app.state.settings.chunk_size,
            limiter=request.app.state.limiter,
        )

    return router


def check_accept(request: Request, media_type: str) -> None:
    accept = request.headers.get("accept")
    if not accept:
        return
    family = media_type.split("/")[0] + "/*"
    offered = {part.split(";")[0].strip() for part in accept.split(",")}
    if not offered & {media_type, family, "*/*"}:
        raise ApiError(406, "not_acceptable", f"this resource is {media_type}; Accept was {accept!r}")
