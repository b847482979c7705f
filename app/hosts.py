"""Which `Host` names a token-less service answers on a loopback address (DNS rebinding).

A page on another site can point its own name at 127.0.0.1 (DNS rebinding) and then read a service
on the user's machine as if it were that site: the browser sends the attacker's name as `Host`. A
request that arrived on a loopback address of a service without an API token is therefore answered
only when its `Host` is a loopback name (`localhost`, `*.localhost`, `127.x.y.z`, `[::1]`, with any
port) or one the operator allowed (`--allowed-host NAME`, `*.example.com` for its subdomains, `*`
for any). With a token, the token keeps such pages out; on other addresses the service is reachable
by whoever can route to it, whatever name they use.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Sequence

from starlette.types import Scope

LOOPBACK_NAMES = frozenset({"localhost"})
LOOPBACK_SUFFIX = ".localhost"  # RFC 6761: every name under .localhost is loopback
KNOWN_MAX = 256  # Host values whose answer is remembered (a client chooses them: bounded)


@functools.lru_cache(maxsize=64)
def is_loopback_address(text: str) -> bool:
    """An IP address (text, no brackets) in 127.0.0.0/8 or ::1, IPv4-mapped included."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def host_name(value: bytes) -> str:
    """The name of a `Host` field without its port, lowercased, without a final dot."""
    text = value.decode("latin-1").strip().lower()
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else text[1:]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    return text.rstrip(".")


class HostRule:
    """The names a request arriving on loopback may carry as `Host` (see the module docstring)."""

    def __init__(self, allowed: Sequence[str] = ()) -> None:
        names = [name.strip().lower().rstrip(".") for name in allowed if name.strip()]
        self.any = "*" in names
        self.exact = LOOPBACK_NAMES | {name for name in names if not name.startswith("*.")}
        self.suffixes = (LOOPBACK_SUFFIX, *(name[1:] for name in names if name.startswith("*.")))
        self.known: dict[bytes, bool] = {}  # Host value -> admitted (every request asks)

    def admits(self, scope: Scope, host: bytes | None) -> bool:
        """Whether the request may be answered; `host` is its `Host` field (None: there is none,
        which no browser sends)."""
        if self.any or host is None:
            return True
        server = scope.get("server")
        if not server or not is_loopback_address(server[0]):
            return True
        known = self.known.get(host)
        if known is None:
            name = host_name(host)
            known = name in self.exact or name.endswith(self.suffixes) or is_loopback_address(name)
            if len(self.known) < KNOWN_MAX:
                self.known[host] = known
        return known
