"""The app's routes as requests reach them, and the methods a path has (its `Allow` header).

FastAPI 0.16x keeps an included router as one entry of `app.routes`; `iter_route_contexts`
gives the routes it holds, each with its full path and its included responses (older FastAPI
copies every route into `app.routes`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import routing
from starlette.routing import Match
from starlette.types import Scope

METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def app_routes(app: Any) -> Iterator[Any]:
    """Every route of `app`, each with `path_format`, `methods`, `matches(scope)` (and for API
    routes `responses`, `include_in_schema`), however it was included."""
    iterate = getattr(routing, "iter_route_contexts", None)
    yield from iterate(app.routes) if iterate is not None else app.routes


def allowed_methods(app: Any, scope: Scope) -> str:
    """`Allow` for a request's path: the methods of every route whose path matches it (Starlette's
    405 names only the first such route's), and OPTIONS, which every path answers (204)."""
    methods = {"OPTIONS"}
    probe = {**scope, "method": "GET"}  # a route's path match, whatever the request's method
    for route in app_routes(app):
        if route.methods and route.matches(probe)[0] != Match.NONE:
            methods |= route.methods
    return ", ".join(sorted(methods, key=lambda m: METHOD_ORDER.index(m) if m in METHOD_ORDER else 99))
