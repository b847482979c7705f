"""The Open box as its tests drive it: host names the address guard resolves without DNS (NAMES,
fake_resolve), an app whose guard uses them (opener), a POST /archives/open (open_location), the check
of a refusal (assert_refused), and a small archive to open."""

from __future__ import annotations

import numpy as np

from app.addresses import system_resolve
from testing.service import make_app
from testing.zipbytes import write_pt2

FLOAT32 = 7


NAMES = {  # the resolver the tests give the address guard: names no DNS server knows
    "loopback.test": ["127.0.0.1"],
    "private.test": ["10.20.30.40"],
    "metadata.test": ["169.254.169.254"],
    "v6loop.test": ["::1"],
    "mixed.test": ["93.184.216.34", "10.0.0.1"],  # one public, one private: refused, never reached
    "named.test": ["127.0.0.1"],
}


async def fake_resolve(host: str, port: int) -> list[str]:
    if host in NAMES:
        return NAMES[host]
    return await system_resolve(host, port)


def small_archive(path) -> bytes:
    write_pt2(path, {"w": (FLOAT32, [4, 4], np.arange(16, dtype=np.float32).tobytes())})
    return path.read_bytes()


def opener(**settings):
    app = make_app(**settings)
    app.state.opened.guard.resolve = fake_resolve
    return app


async def open_location(client, location: str, **headers):
    return await client.post("/archives/open", json={"location": location}, headers=headers)


def assert_refused(response, *words: str) -> str:
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "open_refused"
    for word in words:
        assert word in error["message"], error["message"]
    return error["message"]
