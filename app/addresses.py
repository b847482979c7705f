"""Which addresses an opened location may reach: the address rule against server-side request forgery.

A client that names an http(s) location makes this service connect where the client says. So
every host such a connection goes to, redirect targets included, is resolved here and each of its
addresses checked; one refused address refuses the host. The rule (`refusal`):

- Only global unicast addresses are reached: `is_global` and not multicast, and for IPv6 inside
  2000::/3 as well. Python's own lists (which differ between patch releases) are completed here
  with what the IANA special-purpose registries say is not globally reachable: the shared address
  space 100.64.0.0/10 (carrier-grade NAT), 192.0.0.0/24 (IETF protocol assignments), the 6to4
  relay anycast 192.88.99.0/24, 64:ff9b:1::/48 (local NAT64), the IPv4-compatible ::/96.
- An IPv6 address that carries an IPv4 address is judged by that one too: IPv4-mapped
  (::ffff:a.b.c.d) and NAT64 (64:ff9b::a.b.c.d) by the IPv4 address alone, 6to4 (2002:aabb:ccdd::)
  and Teredo (2001::/32: its server and its client) by both, so no spelling of 127.0.0.1 or
  10.0.0.1 gets through.
- Cloud metadata and wire-server endpoints are refused by address even where they count as global
  (`METADATA`: 169.254.169.254, fd00:ec2::254, 100.100.100.200, 168.63.129.16, 169.254.170.2,
  192.0.0.192, ...) and by name before any lookup (`METADATA_NAMES`: metadata.google.internal, ...).

An --allow-open pattern that names a host without a wildcard exempts that host, on the pattern's
port only, from the global-unicast rule (`named`: (host, port) pairs, port None for `:*`); the
policy sends such a host only requests within that pattern's path (app/open_policy.py). Metadata
endpoints are refused even then. The guard is the reader's `HttpOptions.resolve_host` hook, asked
as each connection is made (reader/sources/transport/http1/pool.py): the connection then goes to the
addresses checked here, so a name resolving elsewhere a moment later changes nothing.

What a refusal says to the client names the rule only; the host and its addresses go to the log.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Collection, Sequence

from reader import HostRefused

log = logging.getLogger("pt2serve")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Metadata and wire-server endpoints, refused whatever a pattern says
METADATA = frozenset(
    ipaddress.ip_address(address)
    for address in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle, Hetzner ... (IMDS)
        "169.254.169.253",  # AWS: the VPC's DNS resolver
        "169.254.169.123",  # AWS: the time service
        "169.254.170.2",  # AWS: ECS task credentials
        "169.254.170.23",  # AWS: EKS Pod Identity
        "fd00:ec2::254",  # AWS: IMDS over IPv6
        "fd00:ec2::23",  # AWS: EKS Pod Identity over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "168.63.129.16",  # Azure: the wire server (a public address)
        "192.0.0.192",  # Oracle Cloud (classic)
        "169.254.0.23",  # Tencent Cloud
    )
)
# Names of metadata services, refused before they are resolved (compared lowercase, without a final '.')
METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.com",
        "metadata.tencentyun.com",
        "metadata.oraclecloud.com",
        "metadata.digitalocean.com",
    }
)
# Not globally reachable by the IANA registries, whatever this Python's `is_global` says
NOT_GLOBAL = {
    "shared address space": [ipaddress.ip_network("100.64.0.0/10")],
    "IETF protocol assignment": [ipaddress.ip_network("192.0.0.0/24")],
    "6to4 relay anycast": [ipaddress.ip_network("192.88.99.0/24")],
    "local NAT64": [ipaddress.ip_network("64:ff9b:1::/48")],
    "IPv4-compatible": [ipaddress.ip_network("::/96")],
    "documentation": [ipaddress.ip_network("3fff::/20"), ipaddress.ip_network("2001:db8::/32")],
}
GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
NAT64 = ipaddress.ip_network("64:ff9b::/96")

Resolve = Callable[[str, int], Awaitable[Sequence[str]]]


def refusal(address: str) -> str | None:
    """Why `address` may not be reached from an opened location, or None if it may."""
    ip = _parse(address)
    reason = _metadata(ip)
    if reason is not None:
        return reason
    if isinstance(ip, ipaddress.IPv6Address):
        for form, embedded in _embedded_ipv4(ip):
            reason = _refusal(embedded)
            if reason is not None:
                return f"{reason} (as {form})"
            if form in ("IPv4-mapped", "NAT64"):
                return None  # the IPv4 address is where the connection goes
    return _refusal(ip)


def metadata_refusal(address: str) -> str | None:
    """`refusal` for a host a pattern names: only the metadata endpoints, in any spelling."""
    return _metadata(_parse(address))


def _metadata(ip: IPAddress) -> str | None:
    """A cloud metadata or wire-server endpoint, as itself or embedded in an IPv6 address."""
    if ip in METADATA:
        return "cloud metadata"
    if isinstance(ip, ipaddress.IPv6Address):
        for form, embedded in _embedded_ipv4(ip):
            if embedded in METADATA:
                return f"cloud metadata (as {form})"
    return None


def _parse(address: str) -> IPAddress:
    return ipaddress.ip_address(address.partition("%")[0])  # fe80::1%eth0: the scope is not the address


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address carries, each with the form that carries it."""
    found: list[tuple[str, ipaddress.IPv4Address]] = []
    if ip.ipv4_mapped is not None:
        found.append(("IPv4-mapped", ip.ipv4_mapped))
    if ip in NAT64:
        found.append(("NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)))
    if ip.sixtofour is not None:
        found.append(("6to4", ip.sixtofour))
    if ip.teredo is not None:
        server, client = ip.teredo
        found += [("Teredo server", server), ("Teredo client", client)]
    return found


def _refusal(ip: IPAddress) -> str | None:
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
    for reason, networks in NOT_GLOBAL.items():
        if any(ip.version == network.version and ip in network for network in networks):
            return reason
    if not ip.is_global:
        return "not global"
    if isinstance(ip, ipaddress.IPv6Address) and ip not in GLOBAL_UNICAST_V6 and ip not in NAT64:
        return "not global unicast"
    return None


async def system_resolve(host: str, port: int) -> list[str]:
    """Every address the system resolver gives `host`."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def host_key(host: str) -> str:
    """A host as patterns and the guard compare it: lowercase, ASCII (IDNA), no brackets, an address
    in its canonical spelling (`0::1` is `::1`)."""
    host = host.strip("[]").lower()
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return host.encode("idna").decode("ascii") if not host.isascii() else host
    except UnicodeError:
        return host


class AddressGuard:
    """`HttpOptions.resolve_host` for opened locations: resolve, check every address, answer them.

    `named`: (host, port) pairs an --allow-open pattern names explicitly (no wildcard in the host;
    port None: the pattern's `:*`), exempt from the global-unicast rule but not from the metadata
    one. `resolve` is the system resolver unless a test gives another."""

    def __init__(self, named: Collection[tuple[str, int | None]], resolve: Resolve = system_resolve) -> None:
        self.named = frozenset((host_key(host), port) for host, port in named)
        self.resolve = resolve

    def _is_named(self, host: str, port: int) -> bool:
        key = host_key(host)
        return (key, port) in self.named or (key, None) in self.named

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        host = host.strip("[]")
        if host.lower().rstrip(".") in METADATA_NAMES:
            log.warning("opened location refused: %s names a cloud metadata service", host)
            raise HostRefused("the host is a cloud metadata service: opened locations may not reach it")
        try:
            addresses = [str(ipaddress.ip_address(host))]  # a literal address is its own answer
        except ValueError:
            try:
                addresses = list(await self.resolve(host, port))
            except OSError as exc:
                log.warning("opened location refused: %s does not resolve: %s", host, exc)
                raise HostRefused("the host does not resolve") from None
        if not addresses:
            log.warning("opened location refused: %s resolves to no address", host)
            raise HostRefused("the host does not resolve")
        check = metadata_refusal if self._is_named(host, port) else refusal
        for address in addresses:
            reason = check(address)
            if reason is not None:
                log.warning("opened location refused: %s:%s resolves to %s, %s", host, port, address, reason)
                raise HostRefused(
                    "the host (of the location or of a redirect) is not a global unicast address: opened "
                    "locations may not reach it unless an --allow-open pattern names the host and port"
                )
        return addresses
