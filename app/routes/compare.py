"""GET /archives/{a}/compare/{b}: what changed between two archives or two versions of one
(reader/compare/ says how each verdict is proven), and the viewer's difference heat maps.

Either side may be `{id}` or `{id}@{version}`. A comparison of two versions is fixed for good:
it is kept with the first side's version (`Opened.remember`) and answered `immutable` when both
URLs name their versions (app/caching.py, `pair_policy`); otherwise it revalidates against a
strong ETag of its bytes.
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

import reader
from reader.pt2.dtypes import dtype_of, to_numpy

from ..caching import pair_policy
from ..openapi import ARCHIVE, MODEL, TENSOR, answers, json_resource
from ..registry import Served
from ..values import SMALL_BYTES, SMALL_ELEMENTS, heatmap, sample, shape2d_of
from ..versioning import TaggedJson, json_etag_response
from .params import ModelQ, PrefixQ, serve

router = APIRouter()

SideA = Annotated[
    str, Path(description="the old side: an archive id, or `{id}@{version}`", alias="archive_id")
]
SideB = Annotated[str, Path(description="the new side: an archive id, or `{id}@{version}`", alias="other_id")]
ExactQ = Annotated[
    bool,
    Query(description="figures from a full pass over large changed tensors (default: sampled above 16 MiB)"),
]


async def _sides(request: Request, a: str, b: str) -> tuple[Served, Served]:
    served_a = await serve(request, a)
    served_b = await serve(request, b)
    return served_a, served_b


@router.get(
    "/archives/{archive_id}/compare/{other_id}",
    summary="What changed between two archives or two versions: per tensor, and by module",
    responses=answers(
        ARCHIVE, MODEL, json_resource("per tensor: same, changed (figures), retyped, moved, ...")
    ),
)
async def compare_archives(
    request: Request,
    a: SideA,
    b: SideB,
    model: ModelQ = None,
    prefix: PrefixQ = None,
    exact: ExactQ = False,
) -> Response:
    served_a, served_b = await _sides(request, a, b)
    key = ("compare", served_b.id, served_b.version, model, prefix, exact)
    tagged = served_a.opened.prepared.get(key)
    if tagged is None:
        diff = await reader.compare(
            served_a.archive,
            served_b.archive,
            model_a=model,
            model_b=model,
            prefix=prefix,
            exact=exact,
            digests_a=served_a.digests,
            digests_b=served_b.digests,
        )
        content = diff.to_dict()
        del content["summary"]["bytes_read"]  # how much this request read, not what differs
        sides = {"a": _side(served_a), "b": _side(served_b)}
        tagged = served_a.opened.remember(key, TaggedJson.of({**sides, **content}))
    headers = pair_policy(served_a.pinned and served_b.pinned, request.scope)
    return json_etag_response(request, tagged, headers)


@router.get(
    "/archives/{archive_id}/compare/{other_id}/tensors/{name:path}",
    summary="One tensor on both sides: heat maps of each and of their difference (a - b), sampled as /stats",
    responses=answers(ARCHIVE, TENSOR, json_resource("heat maps of both sides and of their difference")),
)
async def compare_tensor(request: Request, a: SideA, b: SideB, name: str, model: ModelQ = None) -> Response:
    served_a, served_b = await _sides(request, a, b)
    info_a = served_a.archive.layout(name, model=model)
    info_b = served_b.archive.layout(name, model=model if model in served_b.archive.models else None)
    geometry_a, geometry_b = info_a.geometry, info_b.geometry  # UnsupportedPayload unless readable
    if geometry_a.dtype != geometry_b.dtype or geometry_a.sizes != geometry_b.sizes:
        shapes = (f"{g.dtype}{list(g.sizes)}" for g in (geometry_a, geometry_b))
        raise reader.UnsupportedPayload(
            f"{name}: {' against '.join(shapes)} cannot be compared value by value"
        )
    rows_a, rows_b = await _rows(served_a.archive, info_a), await _rows(served_b.archive, info_b)
    maps: dict[str, Any] = {"a": None, "b": None, "difference": None}
    if rows_a is not None and rows_b is not None:
        wide = np.complex128 if rows_a.dtype.kind == "c" else np.float64
        with np.errstate(over="ignore", invalid="ignore"):
            difference = rows_a.astype(wide) - rows_b.astype(wide)
        maps = {
            "a": heatmap(rows_a, geometry_a.dtype),
            "b": heatmap(rows_b, geometry_a.dtype),
            "difference": heatmap(difference, "float64" if wide is np.float64 else "complex128"),
        }
    sampled = geometry_a.nbytes > SMALL_BYTES or geometry_a.numel > SMALL_ELEMENTS
    content = {
        "name": name,
        "dtype": geometry_a.dtype,
        "sizes": list(geometry_a.sizes),
        "sampled": sampled,
        "sampled_rows": None if rows_a is None else int(rows_a.shape[0]),
        "heatmaps": maps,
    }
    headers = pair_policy(served_a.pinned and served_b.pinned, request.scope)
    return json_etag_response(request, content, headers)


async def _rows(archive: reader.Archive, info: reader.TensorInfo) -> np.ndarray | None:
    """The rows of the tensor's 2-D view the stats route draws its heat map from: all of them for
    a small tensor, the same evenly spaced rows for a large one (None: no 2-D view, or blocks)."""
    geometry = info.geometry
    shape2d = shape2d_of(geometry.sizes)
    if shape2d is None:
        return None
    if geometry.nbytes <= SMALL_BYTES and geometry.numel <= SMALL_ELEMENTS:
        raw = await archive.read(info.name, model=info.model, order="contiguous")
        return to_numpy(raw, dtype_of(geometry.dtype), shape2d)
    _, rows, _ = await sample(archive, info)
    return rows


def _side(served: Served) -> dict[str, Any]:
    return {"archive": served.id, "version": served.version}
