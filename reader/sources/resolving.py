"""Connections go to the addresses `HttpOptions.resolve_host` answered, for every host and hop.

A caller that must not reach some addresses (the service opening a location a client named) checks
a host's addresses in that hook. Checking a name and then letting the connection resolve it again
would leave a gap (DNS rebinding: the second answer differs), so the transports connect to the
very addresses the hook answered: aiohttp through a resolver of its own (`HookResolver`), the bulk
pool (bulk.py) by connecting to each address in turn. A URL whose host is an IP literal resolves to
itself without asking a resolver, so `check_literal` asks the hook for those.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult

from .options import ResolveHost


class HookResolver(AbstractResolver):
    """aiohttp's resolver interface over a `resolve_host` hook (aiohttp connects to what it answers)."""

    def __init__(self, resolve_host: ResolveHost) -> None:
        self.resolve_host = resolve_host

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = await self.resolve_host(host, port)
        return [_result(host, address, port) for address in addresses]

    async def close(self) -> None:
        return None


def _result(hostname: str, address: str, port: int) -> Any:
    family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    return {"hostname": hostname, "host": address, "port": port, "family": family, "proto": 0,
            "flags": socket.AI_NUMERICHOST}  # fmt: skip


def is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


async def check_literal(resolve_host: ResolveHost | None, host: str, port: int) -> None:
    """Ask the hook about an IP-literal host (no resolver sees those); raises what the hook raises."""
    if resolve_host is not None and is_literal(host):
        await resolve_host(host.strip("[]"), port)
