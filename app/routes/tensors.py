"""Tensor routes: the listing, a layout's JSON and a tensor's bytes (raw or .npy).

`build` declares them once for an archive dependency; app.main mounts them for the
default archive (`/tensors/...`) and per archive (`/archives/{archive_id}/tensors/...`).
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

import reader
from reader.bodies import SliceBytes, TensorBytes
from reader.digests import repr_digest, tensor_key
from reader.formats.body import Body
from reader.formats.npy import npy_body
from reader.formats.selection import select_tensors
from reader.pt2.index_syntax import INDEX_SYNTAX, parse_index

from ..errors import ApiError
from ..fields import Fields
from ..openapi import (
    ARCHIVE,
    MODEL,
    NOT_ACCEPTABLE,
    SLICE,
    TENSOR,
    TENSOR_BYTES,
    Listing,
    answers,
    json_resource,
)
from ..registry import Served
from ..responses import BodyResponse
from ..versioning import TaggedJson, caching_headers, data_url, json_etag_response, tensor_etag, version_etag
from .params import FormatQ, KindQ, ModelQ, OrderQ, PrefixQ, get_and_head

SliceQ = Annotated[
    str | None,
    Query(
        description="a slice of the tensor in NumPy's basic indexing, e.g. `0:128,:,4:8`, `-1`, `::2,...`: "
        "its row-major bytes (order is ignored), only the bytes it covers read. A text the pattern refuses "
        "is 400 `bad_slice`; one it accepts that indexes past the tensor (an index past a dim's end, more "
        "indices than dims) names no part of it: 404 `slice_out_of_range`",
        # documented here, enforced by parse_index (the same grammar), so both lanes answer bad_slice
        json_schema_extra={"pattern": INDEX_SYNTAX},
    ),
]


def layout_json(served: Served, info: reader.TensorInfo) -> dict[str, object]:
    """The layout JSON plus the archive version and (readable tensors) the versioned data URL."""
    extra: dict[str, object] = {"archive_version": served.version}
    if info.readable:
        extra["data_url"] = data_url(served.id, served.version, info)
    return {**info.to_dict(), **extra}


def build(resolve: Callable[..., Awaitable[Served]], where: str) -> APIRouter:
    """The tensor routes of the archive `resolve` finds (`where` names it in the docs)."""
    router = APIRouter()
    ServedArchive = Annotated[Served, Depends(resolve)]  # noqa: N806 - a type alias

    @router.get(
        "/tensors",
        summary=f"List {where}'s tensors",
        responses=answers(
            ARCHIVE,
            MODEL,
            json_resource("the tensors' layouts", Listing("/tensors", "name", {"model": "model"})),
        ),
    )
    async def list_tensors(
        request: Request,
        served: ServedArchive,
        model: ModelQ = None,
        prefix: PrefixQ = None,
        kind: KindQ = None,
    ) -> Response:
        headers = caching_headers(request, served)
        tensors = select_tensors(served.archive, model, prefix, every_model=True)
        if kind:
            tensors = [t for t in tensors if t.kind == kind]
        content = {
            "archive": served.id,
            "version": served.version,
            "models": served.archive.models,
            "tensors": [layout_json(served, t) for t in tensors],
        }
        return json_etag_response(request, content, headers)

    @router.get(
        "/tensors/{name:path}/layout",
        summary=f"A tensor's layout ({where})",
        responses=answers(ARCHIVE, TENSOR, json_resource("the tensor's layout")),
    )
    async def tensor_layout(
        request: Request, served: ServedArchive, name: str, model: ModelQ = None
    ) -> Response:
        headers = caching_headers(request, served)
        key = ("layout", name, model)
        tagged = served.opened.prepared.get(key)
        if tagged is None:
            layout = layout_json(served, served.archive.layout(name, model=model))
            tagged = served.opened.remember(key, TaggedJson.of(layout))
        return json_etag_response(request, tagged, headers)

    @get_and_head(
        router,
        "/tensors/{name:path}/data",
        summary=f"A tensor's bytes ({where})",
        head_summary=f"A tensor's bytes ({where}, headers only)",
        responses=answers(ARCHIVE, TENSOR, TENSOR_BYTES, NOT_ACCEPTABLE, SLICE),
    )
    async def tensor_data(
        request: Request,
        served: ServedArchive,
        name: str,
        model: ModelQ = None,
        order: OrderQ = "default",
        format: FormatQ = "raw",
        slice: SliceQ = None,
    ) -> Response:
        if slice is not None:
            answer = slice_representation(served, name, model, format, slice)
        else:
            key = ("data", name, model, order, format, served.pinned)
            answer = served.opened.prepared.get(key)
            if answer is None:
                answer = await representation(request, served, name, model, order, format)
                if answer.final:
                    served.opened.remember(key, answer)
        check_accept(request, answer.media_type)
        state = request.app.state
        return BodyResponse(
            request,
            answer.body,
            etag=answer.etag,
            media_type=answer.media_type,
            headers=caching_headers(request, served),
            described=answer.headers,
            chunk_size=state.settings.chunk_size,
            limiter=state.limiter,
        )

    return router


@dataclass(frozen=True)
class Representation:
    """A tensor's data response, whatever the request asks of it: the body, its type, its ETag
    and the headers that describe it. `final`: nothing later can change it for this archive
    version (its digest is known), so the hot route keeps it."""

    body: Body
    media_type: str
    etag: str
    headers: Fields
    final: bool


async def representation(
    request: Request, served: Served, name: str, model: str | None, order: str, fmt: str
) -> Representation:
    if fmt == "npy":
        tensor = served.archive.tensor(name, model=model, order="contiguous")
        body, media_type = npy_body(tensor), "application/x-npy"
    else:
        tensor = served.archive.tensor(name, model=model, order=order)
        body, media_type = tensor, "application/octet-stream"
    info, geometry = tensor.info, tensor.geometry
    headers = {
        "x-tensor-dtype": geometry.dtype,
        "x-tensor-shape": ",".join(map(str, geometry.sizes)),
        "x-tensor-dim-order": ",".join(map(str, tensor.dim_order)),
    }
    digest, content_etag = await representation_digest(request, served, tensor, body, fmt)
    if digest is not None:
        headers["repr-digest"] = repr_digest(digest)
    if content_etag and digest is not None:
        etag = tensor_etag(digest, tensor, fmt)
    else:  # bytes fixed by the archive version: a strong ETag too, only not shared across versions
        etag = version_etag(served, info.model, info.name, tensor.order, fmt)
    return Representation(body, media_type, etag, Fields(headers), final=digest is not None)


async def representation_digest(
    request: Request, served: Served, tensor: TensorBytes, body: Body, fmt: str
) -> tuple[bytes | None, bool]:
    """The SHA-256 of the whole response body if known, and whether the ETag may come from it.

    Computed before the headers when that is cheap: a local archive (read at disk speed, once
    per version) or a body of at most PT2SERVE_DIGEST_INLINE_MAX bytes; both tests give the
    same answer on every replica, so every replica sends the same ETag. A large remote tensor
    is not read twice (the whole of it before the first byte of a Range answer): its digest is
    used once something else computed it (the manifest), and then only on unversioned URLs,
    since a versioned URL's slices may come from replicas that differ in what they computed
    (nginx refuses to join slices whose ETags differ). An amplified view (far more bytes declared
    than lie behind it) is treated so even locally: a Range of it costs only what it sends.
    """
    key = tensor_key(tensor.info, tensor.order, fmt)
    settings = request.app.state.settings
    if (served.local and not tensor.amplified) or body.length <= settings.digest_inline_max:
        return await served.digests.of(key, lambda: body.chunks(0, body.length, settings.chunk_size)), True
    known = served.digests.cached(key)
    return known, known is not None and not served.pinned


def slice_representation(served: Served, name: str, model: str | None, fmt: str, text: str) -> Representation:
    """`full[index]` of a tensor for `?slice=`: planned here, read when the body is sent. A slice
    that does not parse (the documented pattern refuses it) is 400 `bad_slice`; one that parses but
    lies outside the tensor (an index past a dim's end, more indices than dims) names no part of it:
    404 `slice_out_of_range`, as a missing tensor is (416 is for a Range on the slice's bytes).
    Its ETag is strong: the archive version, the tensor and the normalized slice (equal selections,
    `0:4` and `:4`, share one). Not the tensor's content digest, which would mean reading the
    whole tensor for a slice of it; so a slice's ETag changes with every archive version."""
    try:
        index = parse_index(text)
    except ValueError as error:
        raise ApiError(400, "bad_slice", f"slice={text!r}: {error}") from None
    tensor = served.archive.tensor(name, model=model, order="contiguous")
    try:
        sliced = SliceBytes(tensor, index)
    except IndexError as error:
        raise ApiError(404, "slice_out_of_range", f"slice={text!r}: {error}") from None
    except (TypeError, ValueError) as error:
        raise ApiError(400, "bad_slice", f"slice={text!r}: {error}") from None
    body: Body = sliced
    media_type = "application/octet-stream"
    if fmt == "npy":
        body, media_type = npy_body(sliced), "application/x-npy"  # type: ignore[arg-type]
    info = tensor.info
    etag = version_etag(served, info.model, info.name, "slice", sliced.key, fmt)
    headers = {
        "x-tensor-dtype": tensor.geometry.dtype,
        "x-tensor-shape": ",".join(map(str, sliced.plan.shape)),
        "x-tensor-dim-order": ",".join(map(str, sliced.dim_order)),
        "x-tensor-slice": sliced.key,
    }
    return Representation(body, media_type, etag, Fields(headers), final=False)


def check_accept(request: Request, media_type: str) -> None:
    accept = _first(request.scope["headers"], b"accept")  # no Headers object: every data request
    if not accept:
        return
    family = media_type.split("/")[0] + "/*"
    offered = {part.split(";")[0].strip() for part in accept.split(",")}
    if not offered & {media_type, family, "*/*"}:
        raise ApiError(406, "not_acceptable", f"this resource is {media_type}; Accept was {accept!r}")


def _first(fields: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first value of a header field (as Starlette's Headers gives it)."""
    for key, value in fields:
        if key == name:
            return value.decode("latin-1")
    return None
