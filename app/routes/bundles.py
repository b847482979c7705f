"""Bundles: selected tensors of one archive as one file (safetensors, ExecuTorch .ptd), streamed
and range-capable."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from reader.formats import ptd
from reader.formats.safetensors import safetensors_body, writable
from reader.formats.selection import select

from ..errors import ApiError
from ..openapi import ARCHIVE, BUNDLE, SELECTION, answers
from ..responses import BodyResponse
from ..versioning import caching_headers, version_etag
from .params import ModelQ, NamedArchive, NamesQ, PrefixQ, get_and_head

router = APIRouter()


@get_and_head(
    router,
    "/archives/{archive_id}/safetensors",
    summary="Selected tensors as one safetensors file",
    responses=answers(ARCHIVE, SELECTION, BUNDLE),
)
async def archive_safetensors(
    request: Request, served: NamedArchive, model: ModelQ = None, prefix: PrefixQ = None, name: NamesQ = None
) -> Response:
    archive = served.archive
    selection = select(archive, writable, "safetensors", model=model, prefix=prefix, names=name)
    tensors = [archive.tensor(t.name, model=t.model, order="contiguous") for t in selection.chosen]
    metadata = {"format": "pt", "pt2serve.archive": served.id}
    body = safetensors_body(tensors, metadata, [t.name for t in selection.skipped])
    return BodyResponse(
        request,
        body,
        etag=version_etag(served, "safetensors", *(f"{t.model}/{t.name}" for t in selection.chosen)),
        media_type="application/octet-stream",
        headers={
            **caching_headers(request, served),
            "content-disposition": f'attachment; filename="{served.id}.safetensors"',
        },
        chunk_size=request.app.state.settings.chunk_size,
        limiter=request.app.state.limiter,
    )


ALIGNMENTS = tuple(1 << n for n in range(3, ptd.MAX_ALIGNMENT.bit_length()))  # 8 .. 1 MiB
AlignmentQ = Annotated[
    int,
    Query(
        description="segment alignment in bytes: a power of two from 8 to 1 MiB (ExecuTorch's is 128)",
        json_schema_extra={"enum": list(ALIGNMENTS)},  # the rule as OpenAPI can state it (ptd checks it)
    ),
]


@get_and_head(
    router,
    "/archives/{archive_id}/ptd",
    summary="Selected tensors as one ExecuTorch .ptd (FlatTensor) data file",
    head_summary="Selected tensors as one ExecuTorch .ptd data file (headers only)",
    responses=answers(ARCHIVE, SELECTION, BUNDLE),
)
async def archive_ptd(
    request: Request,
    served: NamedArchive,
    model: ModelQ = None,
    prefix: PrefixQ = None,
    name: NamesQ = None,
    alignment: AlignmentQ = ptd.DEFAULT_ALIGNMENT,
) -> Response:
    """Keys are the tensors' names, as a .pte exported with external constants asks for them;
    tensors ExecuTorch cannot hold are named (percent-encoded, comma-separated) in
    `X-Pt2serve-Skipped`, or refused with 422 when asked for by name."""
    archive = served.archive
    try:
        selection = select(archive, ptd.writable, ".ptd", model=model, prefix=prefix, names=name)
        plan = ptd.cached_plan(tuple(selection.chosen), alignment)
    except ValueError as exc:
        raise ApiError(422, "invalid_request", str(exc)) from None
    body = ptd.ptd_body(plan, lambda info, order: archive.tensor(info.name, model=info.model, order=order))
    headers = {
        **caching_headers(request, served),
        "content-disposition": f'attachment; filename="{served.id}.ptd"',
    }
    if selection.skipped:
        headers["x-pt2serve-skipped"] = ",".join(quote(t.name, safe="") for t in selection.skipped)
    return BodyResponse(
        request,
        body,
        etag=version_etag(served, "ptd", str(alignment), *(f"{t.model}/{t.name}" for t in selection.chosen)),
        media_type="application/octet-stream",
        headers=headers,
        chunk_size=request.app.state.settings.chunk_size,
        limiter=request.app.state.limiter,
    )
