"""The address rule against addresses the loopback tests cannot reach: non-global, metadata and
wire-server addresses, and IPv6 spellings of loopback, each put on the loopback interface of a network
namespace the test makes (testing/netns.py), with a listener that counts the connections it accepts.

Each location is reachable from inside the namespace (the control), and opening it is refused with the
address rule before any connection; a global address on the same interface, the same way, opens.
"""

from __future__ import annotations

import pytest

from testing import netns

pytestmark = [
    pytest.mark.emulator,
    pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable())),
]

REFUSED = [
    "100.64.1.1",  # shared address space (carrier-grade NAT)
    "100.100.100.200",  # Alibaba Cloud's metadata service
    "168.63.129.16",  # Azure's wire server: a public address
    "192.0.0.192",  # Oracle Cloud's metadata service
    "169.254.170.2",  # ECS task credentials
    "2002:7f00:1::1",  # 6to4 spelling of 127.0.0.1
    "2002:a00:1::1",  # 6to4 spelling of 10.0.0.1
    "64:ff9b::7f00:1",  # NAT64 spelling of 127.0.0.1
]
GLOBAL = "93.184.216.34"  # global unicast: the rule lets it through (it lives on the namespace's loopback)


def url(address: str, path: str = "/m.pt2") -> str:
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{netns.PORT}{path}"


def test_non_global_and_metadata_addresses_are_refused_before_any_connection():
    patterns = (
        "http://*:*/**",
        f"http://168.63.129.16:{netns.PORT}/**",
    )  # a named metadata host: refused all the same
    result = netns.probe([*REFUSED, GLOBAL], patterns, [url(address) for address in [*REFUSED, GLOBAL]])
    assert all(result["control"].values()), result["control"]  # every listener is reachable from inside
    for address in REFUSED:
        opened = result["opens"][url(address)]
        assert (opened["status"], opened["code"]) == (403, "open_refused"), (address, opened)
        assert "not a global unicast address" in opened["message"] and address not in opened["message"]
        assert result["accepted"][address] == 0, address
    assert result["opens"][url(GLOBAL)]["status"] == 200, result["opens"][url(GLOBAL)]
    assert result["accepted"][GLOBAL] >= 1
