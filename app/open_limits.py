"""How often, and how many at once, clients may open locations: a token bucket per client address
(429 + Retry-After past it) and a bound on opens in progress (503 + Retry-After).

Behind a reverse proxy every request comes from the proxy's address; the client is then the one
the proxies name in X-Forwarded-For. Only proxies the operator names (`--trusted-proxy`) are
believed: the field is read from the right (the hop nearest this service), skipping the trusted
proxies' own addresses, and the first other address is the client. What a client writes into the
field itself lies to the left of what its first trusted proxy appended, so it is never reached.

A client is an IPv4 address, or an IPv6 /64: one host commonly holds a whole /64, and a bucket per
address would give it 2^64 buckets."""

from __future__ import annotations

import contextlib
import ipaddress
import math
import time
from collections.abc import Iterator, Sequence

from starlette.types import Scope

from .errors import ApiError

CLIENTS_KEPT = 10_000  # buckets remembered; past it the full ones are forgotten
IPV6_CLIENT_PREFIX = 64  # the IPv6 addresses one client is taken to hold
HOP_MAX = 64  # characters of an X-Forwarded-For entry kept as a client key (an address is shorter)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TrustedProxies:
    """The reverse proxies whose X-Forwarded-For is believed (addresses or networks, `10.0.0.0/8`)."""

    def __init__(self, proxies: Sequence[str] = ()) -> None:
        self.networks: tuple[Network, ...] = tuple(ipaddress.ip_network(p, strict=False) for p in proxies)

    def trusts(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        ip = getattr(ip, "ipv4_mapped", None) or ip
        return any(ip in network for network in self.networks)

    def client(self, scope: Scope) -> str:
        """The client a request comes from: its peer, or behind trusted proxies the address they
        name (the leftmost when every named hop is a trusted proxy)."""
        peer = scope["client"][0] if scope.get("client") else "-"
        if not self.networks or not self.trusts(peer):
            return _key(peer)
        hops = [
            hop.strip()
            for name, value in scope["headers"]
            if name == b"x-forwarded-for"
            for hop in value.decode("latin-1").split(",")
        ]
        hops = [hop for hop in hops if hop]
        for hop in reversed(hops):
            if not self.trusts(hop):
                return _key(hop)
        return _key(hops[0]) if hops else _key(peer)


def _key(hop: str) -> str:
    """One spelling per client (`::ffff:10.0.0.1` and `10.0.0.1` alike; an IPv6 address's /64);
    other text as sent, cut."""
    try:
        ip = ipaddress.ip_address(hop)
    except ValueError:
        return hop[:HOP_MAX]
    ip = getattr(ip, "ipv4_mapped", None) or ip
    if ip.version == 6:
        return str(ipaddress.ip_network(f"{ip}/{IPV6_CLIENT_PREFIX}", strict=False))
    return str(ip)


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
