"""Prometheus metrics: requests, bytes sent, errors, open archives, upstream requests and bytes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .limits import StreamLimiter
from .registry import Registry


class Metrics:
    def __init__(self, archives: Registry, streams: StreamLimiter) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "pt2serve_requests", "HTTP requests", ["route", "method", "status"], registry=self.registry
        )
        self.bytes_sent = Counter(
            "pt2serve_response_bytes", "Response body bytes sent", registry=self.registry
        )
        self.errors = Counter(
            "pt2serve_errors", "Responses with status >= 400", ["status"], registry=self.registry
        )
        self.latency = Histogram(
            "pt2serve_request_seconds",
            "Time to the response's first byte",
            ["route"],
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
        )
        self.active_streams = Gauge(
            "pt2serve_active_streams", "Bodies being streamed", registry=self.registry
        )
        self.active_streams.set_function(lambda: streams.active)
        self.registry.register(_ArchiveCollector(archives))
        self._children: dict[tuple[str, ...], Any] = {}

    def observe(self, route: str, seconds: float) -> None:
        self._child(self.latency, "latency", route).observe(seconds)

    def count(self, route: str, method: str, status: int) -> None:
        self._child(self.requests, "requests", route, method, str(status)).inc()
        if status >= 400:
            self._child(self.errors, "errors", str(status)).inc()

    def _child(self, metric: Counter | Histogram, *key: str) -> Any:
        """`metric.labels(*labels)`, looked up once per label set (labels() costs more than the
        increment: a lock, a tuple and a dict lookup per call, profiled on small requests)."""
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*key[1:])
        return child


class _ArchiveCollector:
    """Reads each open archive's source counters at scrape time."""

    def __init__(self, archives: Registry) -> None:
        self.archives = archives

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        opened = GaugeMetricFamily("pt2serve_open_archives", "Archives open and indexed")
        requests = CounterMetricFamily(
            "pt2serve_upstream_requests", "Requests to archive sources", labels=["archive", "purpose"]
        )
        received = CounterMetricFamily(
            "pt2serve_upstream_bytes", "Bytes read from archive sources", labels=["archive", "purpose"]
        )
        count = 0
        for archive_id, slot in self.archives.slots.items():
            if slot.archive is None:
                continue
            count += 1
            for purpose, stats in slot.archive.stats.items():
                requests.add_metric([archive_id, purpose], stats["requests"])
                received.add_metric([archive_id, purpose], stats["bytes"])
        opened.add_metric([], count)
        yield from (opened, requests, received)


class MetricsMiddleware:
    """Counts every response by route template, method and status, and the bytes it sent."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def counting_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                route = getattr(scope.get("route"), "path", "unmatched")
                self.metrics.observe(route, time.perf_counter() - started)
            elif message["type"] == "http.response.body":
                self.metrics.bytes_sent.inc(len(message.get("body", b"")))
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.count(route, scope["method"], status)
