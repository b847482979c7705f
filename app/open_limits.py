"""How often, and how many at once, clients may open locations: a token bucket per client address
(429 + Retry-After past it) and a bound on opens in progress (503 + Retry-After)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator

from .errors import ApiError

CLIENTS_KEPT = 10_000  # buckets remembered; past it the full ones are forgotten


class OpenLimits:
    def __init__(self, rate: float, burst: int, concurrency: int) -> None:
        self.rate, self.burst, self.concurrency = rate, max(1, burst), max(1, concurrency)
        self.buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, when)
        self.active = 0

    def admit(self, client: str) -> None:
        """Take one token of `client`'s bucket, or raise 429 saying when one is back."""
        now = time.monotonic()
        tokens, when = self.buckets.get(client, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - when) * self.rate)
        if tokens < 1.0:
            wait = math.ceil((1.0 - tokens) / self.rate) if self.rate > 0 else 60
            self.buckets[client] = (tokens, now)
            raise ApiError(429, "too_many_opens", f"too many opens from {client}; retry in {wait} s",
                           {"retry-after": str(wait)})  # fmt: skip
        self.buckets[client] = (tokens - 1.0, now)
        if len(self.buckets) > CLIENTS_KEPT:
            self._forget_full(now)

    def _forget_full(self, now: float) -> None:
        for client, (tokens, when) in list(self.buckets.items()):
            if tokens + (now - when) * self.rate >= self.burst:
                del self.buckets[client]

    @contextlib.contextmanager
    def opening(self) -> Iterator[None]:
        """One open in progress, or 503 when `concurrency` already are."""
        if self.active >= self.concurrency:
            raise ApiError(503, "opens_busy", f"{self.active} opens in progress; retry", {"retry-after": "2"})
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1
