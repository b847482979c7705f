"""The manifest: an archive version's tensors with their digests and versioned data URLs.

What `pull` compares its copy against. Cached like the data it describes: immutable
under `/archives/{id}@{version}/manifest`, revalidated under the unversioned URLs.
Building it needs every selected tensor's digest, so the first request for a version
reads those tensors once (local archives compute digests in the background at open).
Declared once by `build`, mounted beside the tensor routes.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from ..manifest import build_manifest, manifest_tensors
from ..openapi import ARCHIVE, TENSOR, answers, json_resource
from ..registry import Served
from ..versioning import caching_headers, data_url, json_etag_response
from .params import NamesQ, PrefixQ

ModelQ = Annotated[str | None, Query(description="only this model (default: every model)")]


def build(resolve: Callable[..., Awaitable[Served]], where: str) -> APIRouter:
    router = APIRouter()
    ServedArchive = Annotated[Served, Depends(resolve)]  # noqa: N806 - a type alias

    @router.get(
        "/manifest",
        summary=f"The manifest of {where}: tensors, digests, versioned data URLs",
        responses=answers(ARCHIVE, TENSOR, json_resource("the manifest")),
    )
    async def manifest(
        request: Request,
        served: ServedArchive,
        model: ModelQ = None,
        prefix: PrefixQ = None,
        name: NamesQ = None,
    ) -> Response:
        headers = caching_headers(request, served)
        archive = served.archive
        tensors = manifest_tensors(archive, model, prefix, name)
        content = await build_manifest(served.digests, served.version, archive.models, tensors)
        for entry, info in zip(content["tensors"], tensors, strict=True):
            entry["url"] = data_url(served.id, served.version, info) if info.readable else None
        return json_etag_response(request, {"archive": served.id, **content}, headers)

    return router
