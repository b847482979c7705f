"""The address rule (app/addresses.py): global unicast only, embedded IPv4 looked into, metadata and
wire-server endpoints refused by address and by name, a pattern's named host exempt on its port only."""

from __future__ import annotations

import pytest

import reader
from app.addresses import AddressGuard, refusal

pytestmark = pytest.mark.unit

REFUSED = {
    "127.0.0.1": "loopback",
    "10.1.2.3": "private",
    "172.16.0.1": "private",
    "192.168.1.1": "private",
    "100.64.1.1": "shared address space",
    "100.127.255.254": "shared address space",
    "192.0.0.8": "IETF protocol assignment",
    "192.0.0.9": "IETF protocol assignment",  # globally reachable per IANA, refused all the same
    "192.88.99.1": "6to4 relay anycast",
    "198.18.0.1": "private",
    "0.0.0.0": "unspecified",
    "240.0.0.1": "private",
    "224.0.0.1": "multicast",
    "169.254.169.254": "cloud metadata",
    "169.254.170.2": "cloud metadata",
    "100.100.100.200": "cloud metadata",
    "168.63.129.16": "cloud metadata",
    "192.0.0.192": "cloud metadata",
    "fd00:ec2::254": "cloud metadata",
    "::1": "loopback",
    "::": "unspecified",
    "fe80::1%eth0": "link-local",
    "fc00::1": "private",
    "ff02::1": "multicast",
    "2001:db8::1": "private",
    "::ffff:127.0.0.1": "loopback (as IPv4-mapped)",
    "::ffff:100.64.0.1": "shared address space (as IPv4-mapped)",
    "::ffff:169.254.169.254": "cloud metadata (as IPv4-mapped)",
    "2002:7f00:1::": "loopback (as 6to4)",
    "2002:a00:1::1": "private (as 6to4)",
    "2002:a9fe:a9fe::": "cloud metadata (as 6to4)",
    "2001:0:4136:e378:8000:63bf:80ff:fffe": "loopback (as Teredo client)",  # client 127.0.0.1
    "64:ff9b::7f00:1": "loopback (as NAT64)",
    "64:ff9b::a9fe:a9fe": "cloud metadata (as NAT64)",
    "64:ff9b:1::808:808": "reserved",
    "::7f00:1": "reserved",  # IPv4-compatible
}
GLOBAL = ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "2a00:1450:4001::1", "::ffff:8.8.8.8",
          "64:ff9b::808:808", "2002:808:808::1"]  # fmt: skip


@pytest.mark.parametrize(("address", "reason"), REFUSED.items())
def test_only_global_unicast_is_reached(address, reason):
    assert refusal(address) == reason


@pytest.mark.parametrize("address", GLOBAL)
def test_global_unicast_is_reached(address):
    assert refusal(address) is None


def resolver(answers: dict[str, list[str]], asked: list[str]):
    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return answers[host.lower()]

    return resolve


async def test_a_named_host_is_exempt_on_its_port_only():
    asked: list[str] = []
    names = {"models.internal": ["10.0.0.5"]}
    guard = AddressGuard({("127.0.0.1", 8000), ("models.internal", None)}, resolver(names, asked))
    assert await guard("127.0.0.1", 8000) == ["127.0.0.1"]
    assert await guard("models.internal", 1234) == ["10.0.0.5"]  # `:*`: any port
    assert await guard("MODELS.internal", 80) == ["10.0.0.5"]
    with pytest.raises(reader.HostRefused):
        await guard("127.0.0.1", 8001)
    with pytest.raises(reader.HostRefused):
        await guard("[::ffff:127.0.0.1]", 8000)  # another spelling is another host


async def test_metadata_is_refused_even_for_a_named_host_and_by_name_before_resolving():
    asked: list[str] = []
    names = {"rebound.test": ["169.254.169.254"]}
    named = {("169.254.169.254", None), ("rebound.test", None), ("metadata.google.internal", None)}
    guard = AddressGuard(named, resolver(names, asked))
    for host in ("169.254.169.254", "rebound.test", "::ffff:a9fe:a9fe"):
        with pytest.raises(reader.HostRefused):
            await guard(host, 80)
    for host in ("metadata.google.internal", "METADATA.google.internal.", "metadata.goog", "instance-data"):
        with pytest.raises(reader.HostRefused, match="metadata"):
            await guard(host, 80)
    assert asked == ["rebound.test"]  # the metadata names were never looked up


async def test_a_refusal_names_the_rule_not_the_host_or_its_address():
    guard = AddressGuard(set(), resolver({"internal.test": ["100.64.1.1"]}, []))
    with pytest.raises(reader.HostRefused) as refused:
        await guard("internal.test", 80)
    message = str(refused.value)
    assert "not a global unicast address" in message
    assert "internal.test" not in message and "100.64" not in message
