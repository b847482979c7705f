"""GET /, /favicon.ico and /viewer/*: the browser viewer, plain files shipped in the package (no build
step, no CDN).

Each file is read once per (mtime, size), with a strong ETag of its bytes and its encoded forms
made on first use: `Cache-Control: no-cache`, so a browser revalidates the page shell and its
modules on each load and gets a 304 (If-None-Match, or If-Modified-Since) for each unchanged one,
and a new release is picked up at once.

The page shell (HTML) carries a Content-Security-Policy: scripts, styles and connections from this
origin only (the viewer has no inline script or style and no CDN), images from here or data:/blob:
URLs (its canvases), no plugins, no <base>, and no framing by any page (clickjacking); with
`Referrer-Policy: no-referrer`, a link the page follows never carries its URL elsewhere.
"""

from __future__ import annotations

import hashlib
import mimetypes
import pathlib
from dataclasses import dataclass, field

from fastapi import APIRouter, Request
from starlette.responses import Response

from ..caching import REVALIDATE, text_response
from ..errors import ApiError

VIEWER = pathlib.Path(__file__).resolve().parent.parent / "viewer"
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".md": "text/markdown; charset=utf-8",
}
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "cache-control": REVALIDATE,
    "content-security-policy": CSP,
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",  # frame-ancestors for browsers that predate it
}
NO_PAGE = b'<!doctype html><title>pt2serve</title><a href="/docs">API documentation</a>'

router = APIRouter()


@dataclass(frozen=True)
class Asset:
    body: bytes
    etag: str
    media_type: str
    modified: float  # seconds since the epoch: Last-Modified
    encoded: dict[str, bytes] = field(default_factory=dict, compare=False)


class Assets:
    """The files under one folder, read when first asked for (and again when they change)."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root.resolve()
        self.known: dict[pathlib.Path, tuple[tuple[int, int], Asset]] = {}

    def find(self, relative: str) -> Asset | None:
        path = (self.root / relative).resolve()
        if not path.is_relative_to(self.root) or not path.is_file():
            return None
        stat = path.stat()
        key = (stat.st_mtime_ns, stat.st_size)
        known = self.known.get(path)
        if known is not None and known[0] == key:
            return known[1]
        body = path.read_bytes()
        media_type = MEDIA_TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0]
        etag = f'"{hashlib.blake2b(body, digest_size=16).hexdigest()}"'
        asset = Asset(body, etag, media_type or "application/octet-stream", stat.st_mtime)
        self.known[path] = (key, asset)
        return asset

    def response(self, request: Request, relative: str, media_type: str | None = None) -> Response:
        asset = self.find(relative)
        if asset is None:
            raise ApiError(404, "not_found", "no such file in the viewer")
        media_type = media_type or asset.media_type
        return text_response(
            request,
            asset.body,
            asset.etag,
            media_type,
            PAGE_HEADERS if media_type.startswith("text/html") else {"cache-control": REVALIDATE},
            encoded=asset.encoded,
            last_modified=asset.modified,
        )


ASSETS = Assets(VIEWER)


@router.get("/", include_in_schema=False)
@router.head("/", include_in_schema=False)
async def index(request: Request) -> Response:
    if ASSETS.find("index.html") is None:
        return Response(NO_PAGE, media_type="text/html", headers=PAGE_HEADERS)
    return ASSETS.response(request, "index.html")


@router.get("/favicon.ico", include_in_schema=False)
@router.head("/favicon.ico", include_in_schema=False)
async def favicon(request: Request) -> Response:
    """Browsers ask for /favicon.ico whatever the page declares; answer with the viewer's icon."""
    return ASSETS.response(request, "icon.svg")


@router.get("/viewer/{path:path}", include_in_schema=False)
@router.head("/viewer/{path:path}", include_in_schema=False)
async def viewer_file(request: Request, path: str) -> Response:
    return ASSETS.response(request, path)
