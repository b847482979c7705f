"""Opening and eviction agree (app/opened.py, app/registry.py): with `open_max=1`, an archive still
opening is never evicted (a local open meanwhile evicts the oldest open archive instead, and the
slow one's open, once it finishes, evicts again); the request that opened an archive gets it; an
archive whose slot was removed while it opened is closed at once; and no upstream connection
outlives its archive. A real loopback origin (FaultServer) holds each slow open's first answer until
the test lets it go, and counts the connections still open."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from app.registry import Slot
from app.settings import ArchiveSpec
from testing.faultserver import FaultServer, Hang
from testing.service import in_process, make_app
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator

FLOAT32 = 7
ROUNDS = 6


def small_archive(path) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_pt2(path, {"w": (FLOAT32, [4, 4], np.arange(16, dtype=np.float32).tobytes())})
    return path.read_bytes()


async def open_location(client, location: str):
    return await client.post("/archives/open", json={"location": location})


async def until_closed(origin: FaultServer) -> int:
    """The origin's open connections once they are all closed, or after a generous wait (a closed
    client's connections end within milliseconds: the loop gives them a few seconds)."""
    for _ in range(500):
        if origin.open_connections == 0:
            break
        await asyncio.sleep(0.01)
    return origin.open_connections


async def started(origin: FaultServer, path: str) -> None:
    while not origin.requests(path):
        await asyncio.sleep(0.005)


async def test_a_slow_open_is_not_evicted_by_a_local_one_and_leaves_no_connection(tmp_path):
    data = small_archive(tmp_path / "remote.pt2")
    local = tmp_path / "local"
    for i in range(ROUNDS + 1):
        small_archive(local / f"l{i}.pt2")
    async with FaultServer() as origin:
        for i in range(ROUNDS):
            origin.put(f"/r{i}.pt2", data)
        app = make_app(
            allow_open=(f"http://127.0.0.1:{origin.port}/*", f"{local}/*"),
            open_max=1,
            open_rate=1000.0,
            open_burst=1000,
        )
        async with in_process(app) as client:
            for i in range(ROUNDS):
                gate = asyncio.Event()
                origin.faults.append(Hang(until=gate, path=f"/r{i}.pt2", times=1))
                slow = asyncio.create_task(open_location(client, origin.url(f"/r{i}.pt2")))
                await started(origin, f"/r{i}.pt2")
                fast = await open_location(client, str(local / f"l{i}.pt2"))
                assert fast.status_code == 200, fast.text
                assert not slow.done()  # the remote open was still under way
                gate.set()
                answer = await slow
                assert answer.status_code == 200, answer.text  # its archive, not a 404
                tensors = await client.get(f"/archives/{answer.json()['id']}/tensors")
                assert tensors.status_code == 200 and [t["name"] for t in tensors.json()["tensors"]] == ["w"]
                listed = [
                    a["id"] for a in (await client.get("/archives")).json()["archives"] if a.get("opened")
                ]
                assert listed == [answer.json()["id"]]  # open_max=1: the local one made room
            last = await open_location(client, str(local / f"l{ROUNDS}.pt2"))  # evicts the last remote
            assert last.status_code == 200, last.text
            assert await until_closed(origin) == 0  # every remote archive closed its connections
        assert not origin.errors


async def test_an_archive_whose_slot_was_removed_while_it_opened_is_closed_at_once(tmp_path):
    data = small_archive(tmp_path / "remote.pt2")
    async with FaultServer() as origin:
        origin.put("/m.pt2", data)
        gate = asyncio.Event()
        origin.faults.append(Hang(until=gate, path="/m.pt2", times=1))
        app = make_app(allow_open=(f"http://127.0.0.1:{origin.port}/*",))
        registry = app.state.registry
        async with in_process(app):
            slot = Slot(ArchiveSpec("m", origin.url("/m.pt2")), opened=True)
            registry.add_opened(slot)
            opening = asyncio.create_task(registry.open_now(slot))
            await started(origin, "/m.pt2")
            await registry.remove("m")
            gate.set()
            await opening
            assert slot.archive is None and "m" not in registry.slots
            assert await until_closed(origin) == 0


async def test_two_slow_opens_at_once_each_get_their_archive_and_leave_no_connection(tmp_path):
    data = small_archive(tmp_path / "remote.pt2")
    small_archive(tmp_path / "local" / "l.pt2")
    async with FaultServer() as origin:
        gates = {name: asyncio.Event() for name in ("a", "b")}
        for name, gate in gates.items():
            origin.put(f"/{name}.pt2", data)
            origin.faults.append(Hang(until=gate, path=f"/{name}.pt2", times=1))
        app = make_app(allow_open=(f"http://127.0.0.1:{origin.port}/*", f"{tmp_path}/local/*"), open_max=1)
        async with in_process(app) as client:
            opens = {
                name: asyncio.create_task(open_location(client, origin.url(f"/{name}.pt2"))) for name in gates
            }
            for name in gates:
                await started(origin, f"/{name}.pt2")
            for name, gate in gates.items():  # a finishes while b still opens, then b
                gate.set()
                answer = await opens[name]
                assert answer.status_code == 200, answer.text
                assert (await client.get(f"/archives/{answer.json()['id']}/tensors")).status_code == 200
            assert (await open_location(client, str(tmp_path / "local" / "l.pt2"))).status_code == 200
            assert await until_closed(origin) == 0
