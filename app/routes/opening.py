"""POST /archives/open: open a location --allow-open allows, answering the archive it became.

The body is a location in a line of JSON: more than `BODY_MAX` bytes is refused (413, and the
connection closed) before more is read, by its Content-Length at once, or as a chunked body's
running count passes the cap."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, ValidationError

from ..caching import NO_STORE
from ..errors import ApiError, json_response
from ..open_policy import MAX_LOCATION
from ..openapi import answers, json_body, kind

router = APIRouter()
BODY_MAX = 16 << 10  # bytes of a request body: a location is at most MAX_LOCATION characters

OPENING = kind(
    "open_refused",
    "opening_disabled",
    "bad_location",
    "too_many_opens",
    "opens_busy",
    "upstream_error",
    "integrity_error",
    "archive_format_error",
    "invalid_request",
    "body_too_large",
)


class OpenRequest(BaseModel):
    location: str = Field(min_length=1, max_length=MAX_LOCATION, description="a path, http(s)://, s3://, ...")


# the body is parsed here, so any malformed one is the service's 422 (FastAPI's own parsing answers
# some with a 400 of its own); the document still declares its schema
BODY = {"required": True, "content": {"application/json": {"schema": OpenRequest.model_json_schema()}}}


@router.post(
    "/archives/open",
    summary="Open a location an --allow-open pattern allows; answers the archive (its id, version, ...)",
    responses=answers(OPENING, json_body("the archive, as GET /archives lists it")),
    openapi_extra={"requestBody": BODY},
)
async def open_location(request: Request):
    # a JSON content type: a cross-site form (text/plain, no preflight) cannot open anything
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise ApiError(422, "invalid_request", "send the body as application/json")
    try:
        body = OpenRequest.model_validate_json(await read_body(request, BODY_MAX))
    except ValidationError as exc:
        details = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise ApiError(422, "invalid_request", details) from None
    client = request.app.state.proxies.client(request.scope)
    slot = await request.app.state.opened.open(body.location, client)
    response = json_response(slot.describe())
    response.headers["cache-control"] = NO_STORE
    return response


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, or a 413 as soon as it is known to be longer than `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise ApiError(422, "invalid_request", "Content-Length is not a number")
        if int(declared) > limit:
            raise _too_large(limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _too_large(limit)
    return bytes(body)


def _too_large(limit: int) -> ApiError:
    # the rest of the body is never read: the connection closes after the answer
    return ApiError(413, "body_too_large", f"the body is longer than {limit} bytes", {"connection": "close"})
