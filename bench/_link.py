"""A storage link slower than the CPUs: what the loopback rows cannot show.

On loopback the storage server, the service and curl share two cores, so a row measures CPU as much
as transfer. Real object storage sits behind a link that is the limit: `capped_link(port, rate)`
shapes the bytes the storage server sends (source port `port` on `lo`) to `rate` with an HTB class,
and leaves every other loopback flow (the service's answers to curl) unshaped. Both contenders then
read the storage through the same link. Needs root and `tc` (iproute2); the qdisc is removed on exit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager


def can_shape() -> str | None:
    """None when `lo` can be shaped here, else why not."""
    if shutil.which("tc") is None:
        return "tc is not installed (apt-get install -y iproute2)"
    if os.geteuid() != 0:
        return "shaping lo needs root"
    return None


def _tc(*args: str) -> None:
    subprocess.run(["tc", *args], check=True, capture_output=True, text=True)


@contextmanager
def capped_link(port: int, rate: str) -> Iterator[None]:
    """Bytes sent from 127.0.0.1:`port` go at most `rate` (tc's units: "4gbit") while inside."""
    _tc("qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "20", "r2q", "1000")
    try:
        _tc("class", "add", "dev", "lo", "parent", "1:", "classid", "1:10", "htb", "rate", rate, "ceil", rate)
        _tc("class", "add", "dev", "lo", "parent", "1:", "classid", "1:20", "htb", "rate", "100gbit")
        _tc("filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
            "match", "ip", "sport", str(port), "0xffff", "flowid", "1:10")  # fmt: skip
        yield
    finally:
        _tc("qdisc", "del", "dev", "lo", "root")
