"""What tensor routes share: the archive a request names (a FastAPI dependency) and query parameters.

Tensor routes are declared once and mounted twice: for the default archive
(`/tensors/...`) and per archive (`/archives/{archive_id}/tensors/...`, where
`{archive_id}` may be `{id}@{version}`: see app/versioning.py); the dependency is
the only difference between the two.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Depends, Path, Query, Request

from ..registry import Served


async def default_archive(request: Request) -> Served:
    return await serve(request, None)


async def named_archive(
    request: Request,
    archive_id: Annotated[
        str, Path(description="an archive id from /archives, or `{id}@{version}` for one version of it")
    ],
) -> Served:
    return await serve(request, archive_id)


async def serve(request: Request, archive_ref: str | None) -> Served:
    """The archive version a URL names: `None` (the default archive), `{id}` or `{id}@{version}`."""
    archive_id, version = archive_ref, None
    if archive_ref is not None:
        archive_id, at, pinned = archive_ref.partition("@")
        version = pinned if at else None
    served = await request.app.state.registry.serve(archive_id, version)
    # the error handlers need to know which archive object failed (request.state.served; set in
    # the scope's state dict itself, which is what request.state wraps, without building a State)
    request.scope.setdefault("state", {})["served"] = served
    return served


NamedArchive = Annotated[Served, Depends(named_archive)]

ModelQ = Annotated[str | None, Query(description="model name (default: the only model, else 'model')")]
PrefixQ = Annotated[str | None, Query(description="only names starting with this")]
KindQ = Annotated[
    Literal["weight", "constant", "custom_object"] | None,
    Query(description="weight, constant or custom_object"),
]
OrderQ = Annotated[
    Literal["default", "contiguous"],
    Query(description="default: memory order (see dim_order); contiguous: row-major"),
]
FormatQ = Annotated[Literal["raw", "npy"], Query(description="raw bytes, or an .npy file")]
NamesQ = Annotated[list[str] | None, Query(description="explicit tensor names (repeatable)")]
