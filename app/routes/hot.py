"""The routes edge devices hit most (a tensor's layout and bytes) without FastAPI's per-request work.

Profiled under `wrk -c32` (py-spy and cProfile, bench/serve_remote.py), a layout request spent
most of its Python time in FastAPI, not in pt2serve: dependency solving, included-router
matching, the per-request exit stack (a bare FastAPI app answers a constant at half the rate a
bare Starlette app does, measured). `HotLane`, inside the app's other middleware (so metrics,
CORS and the token check still see every request; only the caching policy's, which these routes
apply themselves, is inside it), answers these paths itself by calling the
very endpoint functions `tensors.build` declared, with the same archive lookup:

- a `HotRoute` matches only requests it can answer exactly as FastAPI would: the method, the
  path, and a query string whose every parameter is known to the endpoint and valid (Literal
  values checked, no repeats); anything else goes on to FastAPI, whose own route answers (with
  its validation errors), so there is one copy of every rule that is not plain routing;
- an error raised before the response started reaches the app's exception handlers through
  Starlette's own ExceptionMiddleware, built with the handlers the app's would get and handed the
  error; one raised after it propagates (the server aborts the connection), as it would from
  under that middleware. Only errors go through it: its per-request Request and its wrapper
  around every `send` were a tenth of a 64 KiB Range request's time in process (bench/README.md).
  The metrics middleware sees the same route template.

The FastAPI routes stay: they define the OpenAPI document and handle the unusual requests.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Awaitable
from urllib.parse import parse_qsl

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .params import serve

HOT_PATHS = ("/tensors/{name:path}/layout", "/tensors/{name:path}/data")
_ANY = object()  # a query parameter that takes any single string


class HotRoute:
    """One of `HOT_PATHS` for the default archive (prefix "") or a named one."""

    def __init__(self, route: APIRoute, prefix: str) -> None:
        self.path = prefix + route.path  # the template the metrics label requests with
        self.ending = route.path.rsplit("}", 1)[1]  # "/layout", "/data"
        self.methods = frozenset(route.methods or ())
        self.endpoint = route.endpoint
        self.named = "{archive_id}" in prefix  # its paths start with /archives/, no other's do
        head = r"/archives/(?P<archive_id>[^/]+)" if self.named else ""
        tail = re.escape(route.path.split("{name:path}", 1)[1])
        self.regex = re.compile(f"{head}/tensors/(?P<name>.+){tail}")
        signature = inspect.signature(self.endpoint)
        self.wants_request = "request" in signature.parameters
        self.query = {
            name: _allowed(param.annotation)
            for name, param in signature.parameters.items()
            if name not in ("request", "served", "name")
        }

    def match(self, scope: Scope) -> dict[str, object] | None:
        """What to add to the scope of an (http) request this route answers; None for any other."""
        if scope["method"] not in self.methods:
            return None
        match = self.regex.fullmatch(scope["path"]) if not scope.get("root_path") else None
        if match is None:
            return None
        query = self._query(scope["query_string"])
        if query is None:
            return None
        return {"path_params": match.groupdict(), "hot_query": query, "route": self}

    def _query(self, raw: bytes) -> dict[str, str] | None:
        """The query as endpoint arguments, or None if FastAPI should judge it."""
        if not raw:
            return {}
        found: dict[str, str] = {}
        for key, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True):
            allowed = self.query.get(key)
            if allowed is None or key in found or (allowed is not _ANY and value not in allowed):
                return None
            found[key] = value
        return found

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        params = scope["path_params"]
        served = await serve(request, params.get("archive_id"))
        arguments = {"served": served, "name": params["name"], **scope["hot_query"]}
        if self.wants_request:
            arguments["request"] = request
        response = await self.endpoint(**arguments)
        await response(scope, receive, send)


def _allowed(annotation: object) -> object:
    """What values a query parameter may take on the hot path: a set (Literal), _ANY (str), or
    None (anything else: the request goes to FastAPI)."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    options = [arg for arg in typing.get_args(annotation) if arg is not type(None)] if union else [annotation]
    if all(typing.get_origin(option) is typing.Literal for option in options):
        return frozenset(value for option in options for value in typing.get_args(option))
    if options == [str]:
        return _ANY
    return None


def hot_routes(router: APIRouter, prefix: str) -> list[HotRoute]:
    """HotRoutes for the hot paths among `router`'s routes, as mounted under `prefix`."""
    return [
        HotRoute(route, prefix)
        for route in router.routes
        if isinstance(route, APIRoute) and route.path in HOT_PATHS
    ]


class HotLane:
    """ASGI middleware: a request a `HotRoute` matches is answered by it; any other goes on."""

    def __init__(self, app: ASGIApp, service: FastAPI, routes: list[HotRoute]) -> None:
        self.app = app
        self.endings = tuple({route.ending for route in routes})  # "/layout", "/data"
        # the one route that could match a request, by method, path ending and archive prefix
        self.table = {
            (method, route.ending, route.named): route for route in routes for method in route.methods
        }
        # the handlers Starlette gives the ExceptionMiddleware it builds (500 and Exception are the
        # ServerErrorMiddleware's, outside every user middleware): the same answers to the same errors
        handlers = {key: h for key, h in service.exception_handlers.items() if key not in (500, Exception)}
        self.errors = ExceptionMiddleware(_raise, handlers=handlers, debug=service.debug)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            for ending in self.endings:
                if path.endswith(ending):
                    route = self.table.get((scope["method"], ending, path.startswith("/archives/")))
                    matched = route.match(scope) if route is not None else None
                    if matched is not None:
                        scope.update(matched)
                        await self.answer(route, scope, receive, send)
                        return
                    break
        await self.app(scope, receive, send)

    async def answer(self, route: HotRoute, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        def sending(message: Message) -> Awaitable[None]:  # a plain function: no coroutine per send
            nonlocal started
            started = True
            return send(message)

        try:
            await route.handle(scope, receive, sending)
        except Exception as error:
            if started:
                raise
            scope["hot_error"] = error
            await self.errors(scope, receive, send)


async def _raise(scope: Scope, receive: Receive, send: Send) -> None:
    """What the errors' ExceptionMiddleware wraps: the hot route's error, raised again."""
    raise scope.pop("hot_error")


def install(service: FastAPI, routers: list[tuple[APIRouter, str]]) -> None:
    """Add the hot lane for the hot routes of `routers` (each tensor router and its prefix); call it
    before adding the middleware that must see every request (metrics, CORS, the token check): only
    what it passes on (app.caching's CachePolicy) may be inside it."""
    routes = [route for router, prefix in routers for route in hot_routes(router, prefix)]
    service.add_middleware(HotLane, service=service, routes=routes)
