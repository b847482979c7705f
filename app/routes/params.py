"""What tensor routes share: the archive a request names (a FastAPI dependency), query parameters,
and `get_and_head`, the declaration of a route that answers a body.

Tensor routes are declared once and mounted twice: for the default archive
(`/tensors/...`) and per archive (`/archives/{archive_id}/tensors/...`, where
`{archive_id}` may be `{id}@{version}`: see app/versioning.py); the dependency is
the only difference between the two.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.responses import Response

from ..errors import ApiError
from ..registry import Served

Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])

# Declared for the document only: app/versioning.py's caching_headers reads it from the query.
RedirectQ = Annotated[
    str | None,
    Query(description="1, true or yes: answer 307 to the versioned URL of this one (unversioned URLs)"),
]


async def default_archive(request: Request, redirect: RedirectQ = None) -> Served:
    return await serve(request, None)


async def named_archive(
    request: Request,
    archive_id: Annotated[
        str, Path(description="an archive id from /archives, or `{id}@{version}` for one version of it")
    ],
    redirect: RedirectQ = None,
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


async def one_value_each(request: Request) -> None:
    """Refuse (422) a query parameter that takes one value but came several times: FastAPI would
    keep the last silently, while the OpenAPI document says one. An app-wide dependency."""
    if b"&" not in request.scope["query_string"]:
        return
    seen: set[str] = set()
    repeated = {key for key, _ in request.query_params.multi_items() if key in seen or seen.add(key)}
    route = request.scope.get("route")
    if not repeated or route is None:
        return
    twice = sorted(repeated & _single_valued(route))
    if twice:
        raise ApiError(422, "invalid_request", f"query parameter {twice[0]!r} takes one value; it came twice")


_SINGLE_VALUED: dict[
    int, tuple[Any, frozenset[str]]
] = {}  # id(route) → (route, names): routes are unhashable


def _single_valued(route: Any) -> frozenset[str]:
    """The names of the query parameters of `route` (an APIRoute) that take one value."""
    known = _SINGLE_VALUED.get(id(route))
    if known is not None and known[0] is route:
        return known[1]
    single: set[str] = set()
    dependants = [route.dependant]
    while dependants:
        dependant = dependants.pop()
        single |= {f.alias for f in dependant.query_params if not _takes_many(f.field_info.annotation)}
        dependants += dependant.dependencies
    _SINGLE_VALUED[id(route)] = (route, frozenset(single))
    return frozenset(single)


def _takes_many(annotation: object) -> bool:
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_takes_many(arg) for arg in typing.get_args(annotation))
    return typing.get_origin(annotation) in (list, tuple, set, frozenset) or annotation in (list, tuple, set)


def get_and_head(
    router: APIRouter,
    path: str,
    *,
    summary: str,
    responses: dict[int | str, dict[str, Any]],
    head_summary: str | None = None,
) -> Callable[[Endpoint], Endpoint]:
    """Declare the decorated endpoint for GET and for HEAD at `path`, with the same responses: a
    body route answers HEAD with the headers GET would send (responses.BodyResponse). The HEAD
    operation's summary is `head_summary`, else `summary` marked "(headers only)"."""

    def declare(endpoint: Endpoint) -> Endpoint:
        head = head_summary or f"{summary} (headers only)"
        router.head(path, summary=head, response_class=Response, responses=dict(responses))(endpoint)
        router.get(path, summary=summary, response_class=Response, responses=responses)(endpoint)
        return endpoint

    return declare
