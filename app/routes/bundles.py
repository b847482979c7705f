"""Bundles: selected tensors of one archive as one file (safetensors), streamed and range-capable."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from reader.formats.safetensors import safetensors_body, writable
from reader.formats.selection import select

from ..responses import BodyResponse
from .params import ModelQ, NamedArchive, NamesQ, PrefixQ
from .tensors import CACHE_CONTROL, etag

router = APIRouter()


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
    request: Request, served: NamedArchive, model: ModelQ = None, prefix: PrefixQ = None, name: NamesQ = None
) -> Response:
    archive = served.archive
    selection = select(archive, writable, "safetensors", model=model, prefix=prefix, names=name)
    tensors = [archive.tensor(t.name, t.model, "contiguous") for t in selection.chosen]
    metadata = {"format": "pt", "pt2serve.archive": served.id}
    body = safetensors_body(tensors, metadata, [t.name for t in selection.skipped])
    return BodyResponse(
        request,
        body,
        etag=etag(archive, "safetensors", *(f"{t.model}/{t.name}" for t in selection.chosen)),
        media_type="application/octet-stream",
        headers={
            "cache-control": CACHE_CONTROL,
            "content-disposition": f'attachment; filename="{served.id}.safetensors"',
        },
        chunk_size=request.app.state.settings.chunk_size,
        limiter=request.app.state.limiter,
    )
