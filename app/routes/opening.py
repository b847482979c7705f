"""POST /archives/open: open a location --allow-open allows, answering the archive it became."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, ValidationError

from ..caching import NO_STORE
from ..errors import ApiError, json_response
from ..open_policy import MAX_LOCATION
from ..openapi import answers, json_body, kind

router = APIRouter()

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
        body = OpenRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        details = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise ApiError(422, "invalid_request", details) from None
    client = request.client.host if request.client else "-"
    slot = await request.app.state.opened.open(body.location, client)
    response = json_response(slot.describe())
    response.headers["cache-control"] = NO_STORE
    return response
