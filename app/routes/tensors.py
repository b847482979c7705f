"""Tensor routes: listing, layout JSON, bytes (raw or .npy), and safetensors bundles.

Every route exists for the default archive (`/tensors/...`) and per archive
(`/archives/{archive_id}/tensors/...`); both call the same functions.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

import reader

from ..bodies import BytesBody, ConcatBody, TensorBody
from ..errors import ApiError, json_response
from ..npy import npy_header
from ..registry import Registry
from ..responses import BodyResponse
from ..safetensors_format import safetensors_header, writable

router = APIRouter()

# Tensor bytes at a URL change only when the archive does, and then the ETag changes too.
CACHE_CONTROL = "public, max-age=86400, immutable"
Order = Literal["default", "contiguous"]
Format = Literal["raw", "npy"]
Kind = Literal["weight", "constant", "custom_object"]


def _registry(request: Request) -> Registry:
    return request.app.state.registry


def _etag(archive: reader.Archive, *parts: str) -> str:
    digest = hashlib.blake2b("\0".join((archive.identity, *parts)).encode(), digest_size=16).hexdigest()
    return f'"{digest}"'


async def _listing(
    request: Request, archive_id: str | None, model: str | None, prefix: str | None, kind: str | None
) -> Response:
    registry = _registry(request)
    archive = await registry.get(archive_id)
    tensors = archive.tensors(model)
    if prefix:
        tensors = [t for t in tensors if t.name.startswith(prefix)]
    if kind:
        tensors = [t for t in tensors if t.kind == kind]
    return json_response(
        {
            "archive": registry.slot(archive_id).spec.id,
            "models": archive.models,
            "tensors": [t.to_dict() for t in tensors],
        }
    )


async def _layout(request: Request, archive_id: str | None, name: str, model: str | None) -> Response:
    archive = await _registry(request).get(archive_id)
    return json_response(archive.layout(name, model).to_dict())


async def _data(
    request: Request, archive_id: str | None, name: str, model: str | None, order: str, fmt: str
) -> Response:
    archive = await _registry(request).get(archive_id)
    info = archive.layout(name, model)
    if not info.readable:
        raise reader.UnsupportedPayload(f"{info.model}/{info.name}: {info.unsupported}")
    body: BytesBody | TensorBody | ConcatBody
    if fmt == "npy":
        body = ConcatBody([BytesBody(npy_header(info)), TensorBody(archive, info, "contiguous")])
        media_type = "application/x-npy"
        order = "contiguous"
    else:
        body = TensorBody(archive, info, order)
        media_type = "application/octet-stream"
    _check_accept(request, media_type)
    headers = {
        "cache-control": CACHE_CONTROL,
        "x-tensor-dtype": info.dtype or "",
        "x-tensor-shape": ",".join(str(size) for size in info.sizes or ()),
        "x-tensor-dim-order": ",".join(
            str(dim) for dim in (info.dim_order if order == "default" else range(len(info.sizes or ()))) or ()
        ),
    }
    return BodyResponse(
        request,
        body,
        etag=_etag(archive, info.model, info.name, order, fmt),
        media_type=media_type,
        headers=headers,
        chunk_size=request.app.state.settings.chunk_size,
        limiter=request.app.state.limiter,
    )


async def _safetensors(
    request: Request, archive_id: str, model: str | None, prefix: str | None, names: list[str] | None
) -> Response:
    archive = await _registry(request).get(archive_id)
    if names:
        chosen = [archive.layout(name, model) for name in dict.fromkeys(names)]  # each name once
        refused = [t.name for t in chosen if not writable(t)]
        if refused:
            raise ApiError(
                422, "unsupported_payload", f"cannot be written as safetensors: {', '.join(refused)}"
            )
    else:
        # one model (names are unique only within a model): the named one, else the default
        chosen = [t for t in archive.tensors(archive.resolve_model(model)) if t.name.startswith(prefix or "")]
    skipped = [t.name for t in chosen if not writable(t)]
    chosen = [t for t in chosen if writable(t)]
    metadata = {"format": "pt", "pt2serve.archive": archive_id}
    if skipped:
        metadata["pt2serve.skipped"] = ",".join(skipped)
    header = safetensors_header(chosen, metadata)
    body = ConcatBody([BytesBody(header), *(TensorBody(archive, t, "contiguous") for t in chosen)])
    etag = _etag(archive, "safetensors", *(f"{t.model}/{t.name}" for t in chosen))
    return BodyResponse(
        request,
        body,
        etag=etag,
        media_type="application/octet-stream",
        headers={
            "cache-control": CACHE_CONTROL,
            "content-disposition": f'attachment; filename="{archive_id}.safetensors"',
        },
        chunk_size=request.app.state.settings.chunk_size,
        limiter=request.app.state.limiter,
    )


def _check_accept(request: Request, media_type: str) -> None:
    accept = request.headers.get("accept")
    if not accept:
        return
    family = media_type.split("/")[0] + "/*"
    offered = {part.split(";")[0].strip() for part in accept.split(",")}
    if not offered & {media_type, family, "*/*"}:
        raise ApiError(406, "not_acceptable", f"this resource is {media_type}; Accept was {accept!r}")


ModelQ = Annotated[str | None, Query(description="model name (default: the only model, else 'model')")]
PrefixQ = Annotated[str | None, Query(description="only names starting with this")]
KindQ = Annotated[Kind | None, Query(description="weight, constant or custom_object")]
OrderQ = Annotated[Order, Query(description="default: memory order (see dim_order); contiguous: row-major")]
FormatQ = Annotated[Format, Query(description="raw bytes, or an .npy file")]


@router.get("/tensors", summary="List the default archive's tensors")
async def list_tensors(request: Request, model: ModelQ = None, prefix: PrefixQ = None, kind: KindQ = None):
    return await _listing(request, None, model, prefix, kind)


@router.get("/archives/{archive_id}/tensors", summary="List an archive's tensors")
async def list_archive_tensors(
    request: Request, archive_id: str, model: ModelQ = None, prefix: PrefixQ = None, kind: KindQ = None
):
    return await _listing(request, archive_id, model, prefix, kind)


@router.get("/tensors/{name:path}/layout", summary="A tensor's layout (default archive)")
async def tensor_layout(request: Request, name: str, model: ModelQ = None):
    return await _layout(request, None, name, model)


@router.get("/archives/{archive_id}/tensors/{name:path}/layout", summary="A tensor's layout")
async def archive_tensor_layout(request: Request, archive_id: str, name: str, model: ModelQ = None):
    return await _layout(request, archive_id, name, model)


@router.get(
    "/tensors/{name:path}/data", summary="A tensor's bytes (default archive)", response_class=Response
)
@router.head(
    "/tensors/{name:path}/data",
    summary="A tensor's bytes (default archive) (headers only)",
    response_class=Response,
)
async def tensor_data(
    request: Request, name: str, model: ModelQ = None, order: OrderQ = "default", format: FormatQ = "raw"
):
    return await _data(request, None, name, model, order, format)


@router.get(
    "/archives/{archive_id}/tensors/{name:path}/data", summary="A tensor's bytes", response_class=Response
)
@router.head(
    "/archives/{archive_id}/tensors/{name:path}/data",
    summary="A tensor's bytes (headers only)",
    response_class=Response,
)
async def archive_tensor_data(
    request: Request,
    archive_id: str,
    name: str,
    model: ModelQ = None,
    order: OrderQ = "default",
    format: FormatQ = "raw",
):
    return await _data(request, archive_id, name, model, order, format)


@router.get(
    "/archives/{archive_id}/safetensors",
    summary="Selected tensors as one safetensors file",
    response_class=Response,
)
@router.head(
    "/archives/{archive_id}/safetensors",
    summary="Selected tensors as one safetensors file (headers only)",
    response_class=Response,
)
async def archive_safetensors(
    request: Request,
    archive_id: str,
    model: ModelQ = None,
    prefix: PrefixQ = None,
    name: Annotated[list[str] | None, Query(description="explicit tensor names (repeatable)")] = None,
):
    return await _safetensors(request, archive_id, model, prefix, name)
