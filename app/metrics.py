"""Prometheus metrics: requests, bytes sent, errors, open archives, upstream requests and bytes."""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Awaitable, Iterator

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .limits import StreamLimiter
from .protocol import SENDFILE
from .registry import Registry

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """What every response adds to is kept as plain numbers and made into metric families at
    scrape time. prometheus_client's Counter and Histogram run Python under a lock on every
    update: with the request wrapper they were a tenth of a 64 KiB Range request's instructions
    (callgrind, bench/serve_remote.py). The event loop is the only writer, and a scrape runs on
    it too, so no lock is needed."""

    def __init__(self, archives: Registry, streams: StreamLimiter) -> None:
        self.registry = CollectorRegistry()
        self.requests: dict[tuple[str, str, int], int] = {}  # (route, method, status) -> count
        self.errors: dict[int, int] = {}  # status >= 400 -> count
        self.latency: dict[str, list[float]] = {}  # route -> counts per bucket (+Inf last), then sum
        self.bytes_sent = 0
        self.active_streams = Gauge(
            "pt2serve_active_streams", "Bodies being streamed", registry=self.registry
        )
        self.active_streams.set_function(lambda: streams.active)
        self.registry.register(_ResponseCollector(self))
        self.registry.register(_ArchiveCollector(archives))

    def observe(self, route: str, seconds: float) -> None:
        counts = self.latency.get(route)
        if counts is None:
            counts = self.latency[route] = [0.0] * (len(LATENCY_BUCKETS) + 2)
        counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        counts[-1] += seconds

    def count(self, route: str, method: str, status: int) -> None:
        key = (route, method, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        if status >= 400:
            self.errors[status] = self.errors.get(status, 0) + 1


class _ResponseCollector:
    """The per-response numbers of `Metrics` as Prometheus families, made at scrape time."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        metrics = self.metrics
        requests = CounterMetricFamily(
            "pt2serve_requests", "HTTP requests", labels=["route", "method", "status"]
        )
        for (route, method, status), count in metrics.requests.items():
            requests.add_metric([route, method, str(status)], count)
        sent = CounterMetricFamily("pt2serve_response_bytes", "Response body bytes sent")
        sent.add_metric([], metrics.bytes_sent)
        sendfile = CounterMetricFamily("pt2serve_sendfile_bytes", "Response body bytes sent with sendfile(2)")
        sendfile.add_metric([], SENDFILE.bytes)
        errors = CounterMetricFamily("pt2serve_errors", "Responses with status >= 400", labels=["status"])
        for status, count in metrics.errors.items():
            errors.add_metric([str(status)], count)
        latency = HistogramMetricFamily(
            "pt2serve_request_seconds", "Time to the response's first byte", labels=["route"]
        )
        bounds = [*map(str, LATENCY_BUCKETS), "+Inf"]
        for route, counts in metrics.latency.items():
            cumulative = list(itertools.accumulate(counts[:-1]))
            latency.add_metric([route], list(zip(bounds, cumulative)), counts[-1])
        yield from (requests, sent, sendfile, errors, latency)


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
        route = None

        def counting_send(message: Message) -> Awaitable[None]:
            # a plain function handing on the next layer's awaitable: no coroutine of its own
            nonlocal status, route
            kind = message["type"]
            if kind == "http.response.body":
                self.metrics.bytes_sent += len(message.get("body", b""))
            elif kind == "http.response.zerocopysend":
                self.metrics.bytes_sent += message.get("count") or 0
            elif kind == "http.response.start":
                status = message["status"]
                route = getattr(scope.get("route"), "path", "unmatched")
                self.metrics.observe(route, time.perf_counter() - started)
            return send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            if route is None:  # no response started
                route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.count(route, scope["method"], status)
