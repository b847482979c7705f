"""GET /: the browser viewer, plain files shipped in the package (no build step, no CDN)."""

from __future__ import annotations

import pathlib

from fastapi import APIRouter
from starlette.responses import FileResponse, HTMLResponse, Response

VIEWER = pathlib.Path(__file__).resolve().parent.parent / "viewer"

router = APIRouter()


@router.get("/", include_in_schema=False)
async def index() -> Response:
    page = VIEWER / "index.html"
    if not page.exists():
        return HTMLResponse('<!doctype html><title>pt2serve</title><a href="/docs">API documentation</a>')
    return FileResponse(page, media_type="text/html")


@router.get("/favicon.ico", include_in_schema=False)
async def favicon() -> Response:
    """Browsers ask for /favicon.ico whatever the page declares; answer with the viewer's icon."""
    return FileResponse(
        VIEWER / "icon.svg", media_type="image/svg+xml", headers={"cache-control": "max-age=86400"}
    )
