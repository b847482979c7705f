"""Open locations at non-global addresses, inside a network namespace of our own (`unshare -n`).

Addresses such as 100.64.1.1 or 168.63.129.16 cannot be listened on from the test's own network
without sending traffic elsewhere; inside a fresh namespace they can be put on its loopback
interface, and nothing leaves it. `probe(...)` runs this module as `unshare -n python -m
testing.netns` with a JSON request; the child brings `lo` up, adds the addresses, listens on each
(an HTTP server holding a small archive that counts the connections it accepts), checks that
each is reachable from inside, runs the service in process with the given --allow-open patterns,
opens each location, and prints what happened as JSON.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PORT = 8000


def unavailable() -> str | None:
    """Why `unshare -n` cannot run here (the command and its error), or None."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip is not installed"
    done = subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"`unshare -n ip link set lo up` failed: {done.stderr.strip()}"
    return None


def probe(addresses: Sequence[str], patterns: Sequence[str], locations: Sequence[str]) -> dict[str, Any]:
    """Run the child in a new network namespace; its JSON answer: `control` (each address reachable
    from inside), `accepted` (connections each listener accepted during the opens) and `opens`
    (per location: status, code, message)."""
    request = json.dumps(
        {"addresses": list(addresses), "patterns": list(patterns), "locations": list(locations)}
    )
    done = subprocess.run(
        ["unshare", "-n", sys.executable, "-m", "testing.netns"],
        input=request,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "NO_PROXY": "*", "no_proxy": "*"},
        cwd=Path(__file__).resolve().parent.parent,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the namespace probe failed ({done.returncode}): {done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the child, inside the namespace --------------------------------------------------------------


def _add_addresses(addresses: Sequence[str]) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for address in addresses:
        prefix = 32 if ipaddress.ip_address(address).version == 4 else 128
        subprocess.run(["ip", "addr", "add", f"{address}/{prefix}", "dev", "lo"], check=True)


async def _child(request: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from testing.faultserver import FaultServer
    from testing.service import in_process, make_app
    from testing.zipbytes import write_pt2

    class Counting(FaultServer):
        accepted = 0

        async def _serve_connection(self, reader, writer) -> None:  # type: ignore[no-untyped-def]
            self.accepted += 1
            await super()._serve_connection(reader, writer)

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.pt2"
        write_pt2(path, {"w": (7, [4], np.arange(4, dtype=np.float32).tobytes())})
        data = path.read_bytes()
    servers = {
        address: Counting(host=address, port=PORT, objects={"/m.pt2": data})
        for address in request["addresses"]
    }
    for server in servers.values():
        await server.start()
    try:
        control = {}
        for address in servers:
            try:
                _, writer = await asyncio.open_connection(address, PORT)
                writer.close()
                await writer.wait_closed()
                control[address] = True
            except OSError:
                control[address] = False
        await asyncio.sleep(0.05)
        for server in servers.values():
            server.accepted = 0
        opens = {}
        async with in_process(make_app(allow_open=tuple(request["patterns"]), open_burst=1000)) as client:
            for location in request["locations"]:
                response = await client.post("/archives/open", json={"location": location})
                error = response.json().get("error", {}) if response.status_code != 200 else {}
                opens[location] = {
                    "status": response.status_code,
                    "code": error.get("code"),
                    "message": error.get("message"),
                }
        return {
            "control": control,
            "accepted": {address: server.accepted for address, server in servers.items()},
            "opens": opens,
        }
    finally:
        for server in servers.values():
            await server.stop()


def main() -> None:
    request = json.loads(sys.stdin.read())
    _add_addresses(request["addresses"])
    print(json.dumps(asyncio.run(_child(request))))


if __name__ == "__main__":
    main()
