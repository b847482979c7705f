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
