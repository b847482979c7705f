"""ExecuTorch programs an archive carries (data/executorch/): listed, and served by range, so a
device fetches its program and its .ptd from one archive through one server."""

from __future__ import annotations

import posixpath
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.responses import Response

from ..openapi import ARCHIVE, FILE, PROGRAM, Listing, answers, json_resource
from ..responses import BodyResponse
from ..versioning import caching_headers, json_etag_response, version_etag
from .params import NamedArchive, get_and_head

router = APIRouter()


@router.get(
    "/archives/{archive_id}/executorch",
    summary="The ExecuTorch programs an archive carries",
    responses=answers(
        ARCHIVE, json_resource("the programs, with their versioned URLs", Listing("/files", "name"))
    ),
)
async def list_executorch(request: Request, served: NamedArchive) -> Response:
    headers = caching_headers(request, served)
    base = f"/archives/{quote(served.id, safe='')}@{served.version}/executorch/"  # versioned URLs
    files = [{**file.to_dict(), "url": base + quote(file.name)} for file in served.archive.executorch_files]
    return json_etag_response(
        request, {"archive": served.id, "version": served.version, "files": files}, headers
    )


@get_and_head(
    router,
    "/archives/{archive_id}/executorch/{name:path}",
    summary="One ExecuTorch program the archive carries",
    responses=answers(ARCHIVE, FILE, PROGRAM),
)
async def executorch_file(request: Request, served: NamedArchive, name: str) -> Response:
    archive = served.archive
    body = archive.executorch_file(name)
    filename = quote(posixpath.basename(name))
    return BodyResponse(
        request,
        body,
        etag=version_etag(served, "executorch", name),
        media_type="application/octet-stream",
        headers={
            **caching_headers(request, served),
            "content-disposition": f"attachment; filename*=UTF-8''{filename}",
        },
        chunk_size=request.app.state.settings.chunk_size,
        limiter=request.app.state.limiter,
    )
