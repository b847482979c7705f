"""Which addresses an opened location may reach: the address rule against server-side request forgery.

A client that names an http(s) location makes this service connect where the client says. So
every host such a connection goes to, redirect targets included, is resolved here and refused when
any of its addresses is loopback, private, link-local, multicast, unspecified, reserved or a
cloud metadata address, unless an --allow-open pattern names that host explicitly. The guard is
the reader's `HttpOptions.resolve_host` hook: the connection then goes to the addresses checked
here (reader/sources/http1/pool.py), so a name resolving elsewhere a moment later changes nothing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Collection, Sequence

from reader import HostRefused

# AWS, GCP, Azure, OpenStack: 169.254.169.254 (link-local anyway); AWS's IPv6 one: fd00:ec2::254
METADATA = frozenset({ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")})

Resolve = Callable[[str, int], Awaitable[Sequence[str]]]


def refusal(address: str) -> str | None:
    """Why `address` may not be reached from an opened location, or None if it may."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    if ip in METADATA:
        return "cloud metadata"
    for reason, flagged in (
        ("loopback", ip.is_loopback),
        ("unspecified", ip.is_unspecified),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
    ):
        if flagged:
            return reason
    return None


async def system_resolve(host: str, port: int) -> list[str]:
    """Every address the system resolver gives `host`."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class AddressGuard:
    """`HttpOptions.resolve_host` for opened locations: resolve, check every address, answer them.

    `named`: hosts an --allow-open pattern names explicitly (no wildcard in the host), allowed
    whatever they resolve to. `resolve` is the system resolver unless a test gives another."""

    def __init__(self, named: Collection[str], resolve: Resolve = system_resolve) -> None:
        self.named = frozenset(host.lower().strip("[]") for host in named)
        self.resolve = resolve

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        host = host.strip("[]")
        try:
            addresses = [str(ipaddress.ip_address(host))]  # a literal address is its own answer
        except ValueError:
            try:
                addresses = list(await self.resolve(host, port))
            except OSError as exc:
                raise HostRefused(f"{host} does not resolve: {exc}") from None
        if host.lower().rstrip(".") in self.named:
            return addresses
        if not addresses:
            raise HostRefused(f"{host} resolves to no address")
        for address in addresses:
            reason = refusal(address)
            if reason is not None:
                what = f"{host} is" if host == address else f"{host} resolves to {address},"
                raise HostRefused(
                    f"{what} a {reason} address: opened locations may not reach "
                    "it (an --allow-open pattern naming the host explicitly allows it)"
                )
        return addresses
