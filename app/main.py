"""The FastAPI application: settings → registry, middleware, routes, error handlers."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator

from fastapi import Depends, FastAPI
from starlette.datastructures import State

from . import openapi
from .caching import CachePolicy
from .errors import install_error_handlers
from .hosts import HostRule
from .limits import StreamLimiter
from .metrics import Metrics, MetricsMiddleware
from .open_limits import TrustedProxies
from .opened import OpenedArchives
from .registry import Registry
from .routes import (
    bundles,
    executorch,
    graph,
    hot,
    manifest,
    opening,
    service,
    signing,
    tensors,
    values,
    viewer,
)
from .routes import compare as compare_routes
from .routes.params import default_archive, named_archive, one_value_each
from .security import AccessGate, BearerTokenMiddleware, JsonCORSMiddleware, RequestGuard, quiet_url_logging
from .settings import Settings
from .signing import UrlSigner, derive_key

EXPOSED_HEADERS = [
    "Content-Range",
    "Content-Length",
    "ETag",
    "Accept-Ranges",
    "X-Tensor-Dtype",
    "X-Tensor-Shape",
    "X-Tensor-Dim-Order",
    "X-Tensor-Slice",
    "X-Pt2serve-Skipped",
    "Repr-Digest",
    "Content-Location",
]


# FastAPI's native OpenTelemetry hooks (FastAPI >= 0.16x) ask the global providers on every request
# (a large share of a small request, profiled); the service exports Prometheus metrics at /metrics.
TELEMETRY_OFF = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)


class AppState(State):
    """`app.state` whose values are also plain instance attributes: every request reads a few
    (registry, settings, limiter), and Starlette's State finds each through a Python-level
    `__getattr__` (profiled on small requests). Every way of setting or deleting keeps both."""

    def __setattr__(self, key: str, value: object) -> None:
        super().__setattr__(key, value)
        object.__setattr__(self, key, value)

    def __delattr__(self, key: str) -> None:
        super().__delattr__(key)
        object.__delattr__(self, key)

    def __setitem__(self, key: str, value: object) -> None:
        setattr(self, key, value)

    def __delitem__(self, key: str) -> None:
        delattr(self, key)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_environment()
    quiet_url_logging()
    registry = Registry(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await registry.start()
        try:
            yield
        finally:
            await registry.close()

    app = FastAPI(
        title="pt2serve",
        summary="Tensors out of PyTorch .pt2 archives by name: layouts, bytes, ranges, safetensors.",
        version="0.1.0",
        lifespan=lifespan,
        dependencies=[Depends(one_value_each)],
        **TELEMETRY_OFF,
    )
    state = app.state
    app.state = AppState()
    for key, value in state._state.items():  # whatever FastAPI keeps there (nothing, today)
        app.state[key] = value
    app.state.settings = settings
    app.state.registry = registry
    app.state.opened = OpenedArchives(registry, settings)
    app.state.signer = _signer(settings)
    app.state.gate = AccessGate(settings.api_token, app.state.signer) if settings.api_token else None
    app.state.proxies = TrustedProxies(settings.trusted_proxies)
    app.state.limiter = StreamLimiter(settings.max_streams)
    app.state.metrics = Metrics(registry, app.state.limiter)
    app.include_router(service.router)
    app.include_router(opening.router)
    mounted = []
    for build in (tensors.build, values.build, manifest.build, graph.build):
        for resolve, where, prefix in (
            (default_archive, "default archive", ""),
            (named_archive, "one archive", "/archives/{archive_id}"),
        ):
            router = build(resolve, where)
            app.include_router(router, prefix=prefix)
            mounted.append((router, prefix))
    app.include_router(bundles.router)
    app.include_router(compare_routes.router)
    app.include_router(executorch.router)
    app.include_router(signing.router)
    app.include_router(viewer.router)
    install_error_handlers(app)
    openapi.install(app)
    # outermost last: the caching policy inside the hot lane (whose routes apply it themselves);
    # the hot lane (layout and data without FastAPI's per-request work) inside everything else;
    # CORS answers preflights before the token check; the request guard (two credentials, foreign
    # hosts) outside them all; metrics see everything
    app.add_middleware(CachePolicy)
    hot.install(app, mounted)
    if app.state.gate is not None:
        app.add_middleware(BearerTokenMiddleware, gate=app.state.gate)
    if settings.cors_origins:
        app.add_middleware(
            JsonCORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "HEAD"],
            allow_headers=["Authorization", "Range", "If-None-Match", "If-Range"],
            expose_headers=EXPOSED_HEADERS,
        )
    hosts = HostRule(settings.allowed_hosts) if app.state.gate is None else None
    app.add_middleware(RequestGuard, hosts=hosts)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    return app


def _signer(settings: Settings) -> UrlSigner | None:
    if settings.url_signing_key:
        return UrlSigner(settings.url_signing_key.encode())
    return UrlSigner(derive_key(settings.api_token)) if settings.api_token else None
