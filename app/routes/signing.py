"""GET /sign?path=: a short-lived signed URL for a GET on this service (app/signing.py), so a browser
download, a copied curl command or a device can fetch without holding the API token.

Asking for one needs the token like any other route; without a token or signing key
configured, nothing needs signing and the route answers 404.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from ..errors import ApiError, json_response
from ..openapi import answers, json_body, kind

router = APIRouter()


@router.get(
    "/sign",
    summary="A short-lived signed URL for a GET of one path and query",
    responses=answers(kind("signing_disabled", "bad_url"), json_body("the signed URL and when it expires")),
)
async def sign(
    request: Request,
    path: Annotated[
        str, Query(description="a path on this service, with its query: /archives/a/tensors/w/data")
    ],
    ttl: Annotated[int | None, Query(ge=1, description="seconds until it expires (capped)")] = None,
):
    signer = request.app.state.signer
    if signer is None:
        raise ApiError(404, "signing_disabled", "this service has no API token, so URLs need no signature")
    settings = request.app.state.settings
    try:
        signed, expires = signer.sign(path, min(ttl or settings.signed_url_ttl, settings.signed_url_ttl))
    except ValueError as exc:
        raise ApiError(422, "bad_url", str(exc)) from None
    return json_response({"url": signed, "expires": expires})
