"""Proxies from the environment, with httpx's meaning, for every transport a client mounts.

`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and `NO_PROXY` (either case; lower case wins) are read
by httpx's own rule (`environment_proxies`): a URL scheme's proxy, else ALL_PROXY's, except
for the hosts NO_PROXY names (`*`, a host, a domain and its subdomains, an IP address,
`localhost`). httpx turns an IP network (`10.0.0.0/8`) into a pattern that matches only its
first address; here a request to any address inside it also goes direct, as curl reads it.

The client routes each URL to a transport with httpx's `mounts`: one transport per proxy,
wrapped in `ViaProxy`, which names the proxy (never its credentials) in every connection
failure, so a proxy that cannot be reached is never mistaken for the server, and never
skipped for a direct connection. Credentials in a proxy URL become `Proxy-Authorization: Basic`.
"""

from __future__ import annotations

import base64
import ipaddress
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from httpx._utils import get_environment_proxies  # httpx's reading of the variables, kept exact

from ...errors import SourceError
from .tls import untrusted_certificate

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Proxy:
    """A proxy URL taken apart: where to connect, what to show, what to send."""

    url: str  # without credentials
    scheme: str  # http or https (a TLS connection to the proxy itself)
    host: str
    port: int
    authorization: str | None  # the Proxy-Authorization value, from the URL's credentials

    @classmethod
    def parse(cls, url: str) -> Proxy:
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.lower()
        shown = f"{scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"proxy {shown}: only http:// and https:// proxies are supported")
        authorization = None
        if parts.username is not None or parts.password is not None:
            user = urllib.parse.unquote(parts.username or "")
            password = urllib.parse.unquote(parts.password or "")
            authorization = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        port = parts.port or (443 if scheme == "https" else 80)
        return cls(
            f"{scheme}://{_host_in_url(parts.hostname)}:{port}", scheme, parts.hostname, port, authorization
        )

    @property
    def headers(self) -> dict[str, str]:
        return {"Proxy-Authorization": self.authorization} if self.authorization else {}

    def __repr__(self) -> str:  # never the credentials
        return f"Proxy({self.url!r}{', with credentials' if self.authorization else ''})"


class ProxyRefused(httpx.ProxyError):
    """The proxy answered and said no (a CONNECT refused, 407): another attempt will not change it."""


class ViaProxy(httpx.AsyncBaseTransport):
    """A transport that connects through `proxy`: its connection failures name the proxy; a
    request to an address in a NO_PROXY network goes to `direct` instead."""

    def __init__(
        self,
        through: httpx.AsyncBaseTransport,
        proxy: Proxy,
        direct: httpx.AsyncBaseTransport,
        bypass: tuple[Network, ...] = (),
    ) -> None:
        self.through, self.proxy, self.direct, self.bypass = through, proxy, direct, bypass

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.bypass and _in_networks(request.url.host, self.bypass):
            return await self.direct.handle_async_request(request)
        try:
            response = await self.through.handle_async_request(request)
        except httpx.ProxyError as exc:
            raise ProxyRefused(f"proxy {self.proxy.url} refused: {exc}") from exc
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            if untrusted_certificate(exc):  # the server's certificate, through the tunnel
                raise
            raise httpx.ProxyError(
                f"connection through proxy {self.proxy.url} failed: {type(exc).__name__}: {exc}"
            ) from exc
        if response.status_code == 407:  # only a proxy says this (to an http request it forwards)
            await response.aclose()
            raise ProxyRefused(f"proxy {self.proxy.url} refused: 407 Proxy Authentication Required")
        return response

    async def aclose(self) -> None:
        await self.through.aclose()


def mounts(
    transport_for: Callable[[Proxy | None], httpx.AsyncBaseTransport],
) -> tuple[httpx.AsyncBaseTransport, dict[str, httpx.AsyncBaseTransport | None]]:
    """The direct transport and httpx `mounts` for the proxies the environment names
    (empty when it names none): one transport per proxy, shared by its patterns."""
    direct = transport_for(None)
    configured = get_environment_proxies()
    bypass = tuple(network for pattern in configured if (network := _network(pattern)) is not None)
    by_url: dict[str, httpx.AsyncBaseTransport] = {}
    routes: dict[str, httpx.AsyncBaseTransport | None] = {}
    for pattern, url in configured.items():
        if _network(pattern) is not None:  # httpx would match its first address only: see bypass
            continue
        if url is None:
            routes[pattern] = None  # NO_PROXY: the client's own (direct) transport
            continue
        try:
            proxy = Proxy.parse(url)
        except ValueError as exc:
            raise SourceError(str(exc)) from None
        if url not in by_url:
            by_url[url] = ViaProxy(transport_for(proxy), proxy, direct, bypass)
        routes[pattern] = by_url[url]
    return direct, routes


def refusal(error: BaseException) -> str | None:
    """The message for a proxy that refused the request (None: not a refusal)."""
    return str(error) if isinstance(error, ProxyRefused) else None


def _network(pattern: str) -> Network | None:
    """The IP network of a NO_PROXY pattern such as `all://10.0.0.0/8` (None: not one)."""
    host = pattern.split("://", 1)[-1].strip("[]")
    if "/" not in host:
        return None
    try:
        return ipaddress.ip_network(host, strict=False)
    except ValueError:
        return None


def _in_networks(host: str, networks: tuple[Network, ...]) -> bool:
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return any(address in network for network in networks)


def _host_in_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host
