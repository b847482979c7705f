"""Source faults → what the service's HTTP client sees, end to end.

FaultServer (storage) → the service under a real uvicorn → httpx (the client). For every fault the
client must get byte-exact data or a clean JSON error status; once the headers went out, a failure
must abort the response (connection closed, body shorter than Content-Length → httpx
RemoteProtocolError), never complete it with wrong bytes. The table of faults x outcomes is printed
(run with -s) and copied by hand into bench/README.md, "Fault matrix".

The service builds its sources with the default HttpOptions (read timeout 30 s, 5 attempts, full-body
cap 16 MiB) and has no setting for them, so the "big object ignores Range" case uses a 24 MiB object,
and the hang cases are cut short by the client (see test_client_leaving_during_an_upstream_hang...).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import pytest

from testing.faultserver import (
    ChangeObject,
    Drip,
    DropAfter,
    Fault,
    FaultServer,
    Hang,
    IgnoreRange,
    RefuseSuffix,
    ResetConnection,
    ShortBody,
    Status,
    WrongContentRange,
)
from testing.service import make_app, real_server
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator

BIG = 24 << 20  # > HttpOptions.full_body_cap (16 MiB)
MID = 2 << 20


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("matrix")
    big, mid = os.urandom(BIG), os.urandom(MID)
    write_pt2(folder / "big.pt2", {"big": (7, [BIG // 4], big), "tiny": (7, [4], os.urandom(16))})
    write_pt2(folder / "small.pt2", {"mid": (7, [MID // 4], mid)})
    return {
        "/big.pt2": (folder / "big.pt2").read_bytes(),
        "/small.pt2": (folder / "small.pt2").read_bytes(),
        "big": big,
        "mid": mid,
    }


@dataclass
class Case:
    name: str
    faults: Callable[[dict], list[Fault]]  # built after the archives are open
    tensor: str = "big"  # big (in /big.pt2) or mid (in /small.pt2)
    expect: str = "exact"  # what we expect: exact | error NNN | aborted (documentation + check)
    at_open: bool = False  # faults present before the service opens the archives
    client_timeout: float = 30.0
    note: str = ""


def _flip(data: bytes, at: int, n: int = 64) -> bytes:
    """The same size, other bytes at [at, at+n)."""
    changed = bytearray(data)
    changed[at : at + n] = bytes(b ^ 0xFF for b in changed[at : at + n])
    return bytes(changed)


P = "/big.pt2"
CASES = [
    Case("none (baseline)", lambda o: []),
    Case("500 x2 before headers", lambda o: [Status(500, times=2, path=P, method="GET")]),
    Case("503 x5 (every attempt)", lambda o: [Status(503, times=5, path=P, method="GET")],
         expect="error 502"),
    Case("503 x2 after headers (cut, then 503s on resume)",
         lambda o: [DropAfter(1 << 20, times=1, path=P),
                    Status(503, times=2, after=1, path=P, method="GET")]),
    Case("429 Retry-After: 1", lambda o: [Status(429, times=1, headers={"Retry-After": "1"}, path=P)]),
    Case("connection reset x2", lambda o: [ResetConnection(times=2, path=P, method="GET")]),
    Case("connection reset, always", lambda o: [ResetConnection(times=None, path=P, method="GET")],
         expect="error 502"),
    Case("drop mid-body x2 (FIN)", lambda o: [DropAfter(2 << 20, times=2, path=P)]),
    Case("drop mid-body x2 (RST)", lambda o: [DropAfter(2 << 20, rst=True, times=2, path=P)]),
    Case("drop mid-body, always", lambda o: [DropAfter(1 << 20, times=None, path=P)], expect="aborted",
         note="each 8 MiB part has its own 5 attempts"),
    Case("ignore Range, small object (2 MiB)",
         lambda o: [IgnoreRange(times=None, path="/small.pt2")], tensor="mid"),
    Case("ignore Range, big object (24 MiB > 16 MiB cap)",
         lambda o: [IgnoreRange(times=None, path=P)], expect="error 502"),
    Case("wrong Content-Range (first request)", lambda o: [WrongContentRange(shift=4096, path=P)],
         expect="error 502"),
    Case("wrong Content-Range on resume",
         lambda o: [DropAfter(8 << 20, times=1, path=P), WrongContentRange(shift=4096, after=1, path=P)],
         expect="aborted"),
    Case("wrong total in Content-Range", lambda o: [WrongContentRange(shift=0, total=BIG * 2, path=P)],
         expect="exact", note="seen as a change: reopened, answered again from the reopened archive"),
    Case("short body (206, 1 byte short)", lambda o: [ShortBody(missing=1, path=P)], expect="error 502"),
    Case("slow drip (64 KiB / 20 ms)",
         lambda o: [Drip(chunk_size=64 << 10, interval=0.02, path="/small.pt2")], tensor="mid"),
    Case("object replaced before the read (new ETag)",
         lambda o: [ChangeObject(o["/small.pt2"], path=P, method="GET")], expect="error 404",
         note="answered again from the new object, which has no such tensor"),
    Case("object replaced mid-read (new ETag)",
         lambda o: [DropAfter(8 << 20, times=1, path=P),
                    ChangeObject(_flip(o[P], len(o[P]) // 2), after=1, path=P, method="GET")],
         expect="aborted"),
    Case("object changed mid-read, SAME ETag and size",
         lambda o: [DropAfter(8 << 20, times=1, path=P),
                    ChangeObject(_flip(o[P], len(o[P]) // 2), etag=o["etag"], after=1, path=P,
                                 method="GET")],
         expect="aborted", note="only the CRC-32 can tell"),
    Case("refuse suffix ranges (501) at open", lambda o: [RefuseSuffix(501, times=None, path=P)],
         at_open=True),
    Case("hang 2 s, then answer", lambda o: [Hang(seconds=2, path=P, method="GET")]),
    Case("hang forever (client gives up at 4 s)", lambda o: [Hang(path=P, method="GET")],
         expect="client timeout", client_timeout=4.0,
         note="default upstream timeout: 30 s x 5 attempts (PT2SERVE_UPSTREAM_TIMEOUT, _ATTEMPTS)"),
]  # fmt: skip


@dataclass
class Outcome:
    status: int | None = None
    received: int = 0
    content_length: int | None = None
    error: str = ""
    code: str = ""
    exact: bool | None = None
    seconds: float = 0.0
    upstream_requests: int = 0
    extra: dict = field(default_factory=dict)

    def kind(self) -> str:
        if self.status is None:
            return "client timeout" if "Timeout" in self.error else f"no response ({self.error})"
        if self.status >= 400:
            return f"error {self.status}"
        if self.error:
            return "aborted"
        return "exact" if self.exact else "WRONG BYTES"

    def describe(self) -> str:
        kind = self.kind()
        if kind.startswith("error"):
            return f"{kind} `{self.code}`"
        if kind == "aborted":
            return f"aborted after {self.received:,} of {self.content_length:,} B ({self.error})"
        if kind == "WRONG BYTES":
            return f"**WRONG BYTES**: {self.status}, {self.received:,} B, completed"
        return kind


async def fetch(client: httpx.AsyncClient, path: str, expected: bytes, timeout: float) -> Outcome:
    outcome = Outcome()
    started = time.monotonic()
    received = bytearray()
    try:
        async with client.stream("GET", path, timeout=httpx.Timeout(timeout)) as response:
            outcome.status = response.status_code
            length = response.headers.get("content-length")
            outcome.content_length = int(length) if length is not None else None
            async for chunk in response.aiter_raw():
                received += chunk
            if response.status_code >= 400:
                error = httpx.Response(response.status_code, content=bytes(received)).json()["error"]
                outcome.code = error["code"]
    except httpx.HTTPError as exc:
        outcome.error = type(exc).__name__
    outcome.received = len(received)
    outcome.seconds = time.monotonic() - started
    if outcome.status == 200:
        # what arrived must be right: all of it (completed) or a prefix (aborted)
        outcome.exact = bytes(received) == expected if not outcome.error else expected.startswith(received)
        if outcome.error:
            assert outcome.content_length is not None and outcome.received < outcome.content_length
    return outcome


async def run_case(case: Case, objects: dict) -> Outcome:
    async with FaultServer() as upstream:
        for path in ("/big.pt2", "/small.pt2"):
            upstream.put(path, objects[path])
        context = {**objects, "etag": upstream.etag("/big.pt2")}
        if case.at_open:
            upstream.faults.extend(case.faults(context))
        app = make_app([f"big={upstream.url('/big.pt2')}", f"small={upstream.url('/small.pt2')}"])
        async with real_server(app) as url, httpx.AsyncClient(base_url=url) as client:
            archives = (await client.get("/archives")).json()["archives"]
            assert all(a["status"] == "open" for a in archives), archives
            if not case.at_open:
                upstream.faults.extend(case.faults(context))
            before = len(upstream.log)
            archive = "big" if case.tensor == "big" else "small"
            outcome = await fetch(client, f"/archives/{archive}/tensors/{case.tensor}/data",
                                  objects[case.tensor], case.client_timeout)  # fmt: skip
            outcome.upstream_requests = len(upstream.log) - before
            if case.expect == "client timeout":
                await asyncio.sleep(0.5)
                outcome.extra["stream slots held after the client left"] = app.state.limiter.active
            # stop the storage first: a service still waiting on it then fails fast
            await upstream.stop()
        assert upstream.errors == [], upstream.errors
    return outcome


def print_table(rows: list[tuple[Case, Outcome]]) -> None:
    print("\n| fault | expected | client sees | upstream requests | seconds |")
    print("| --- | --- | --- | --- | --- |")
    for case, outcome in rows:
        extra = "; ".join(f"{k}: {v}" for k, v in outcome.extra.items())
        note = "; ".join(x for x in (case.note, extra) if x)
        print(f"| {case.name} | {case.expect} | {outcome.describe()}{f' ({note})' if note else ''} "
              f"| {outcome.upstream_requests} | {outcome.seconds:.1f} |")  # fmt: skip


async def test_fault_matrix(objects) -> None:
    rows: list[tuple[Case, Outcome]] = []
    violations = []
    for case in CASES:
        outcome = await run_case(case, objects)
        rows.append((case, outcome))
        kind = outcome.kind()
        # an aborted body is incomplete and a client must drop it, whatever its prefix holds;
        # a completed body with wrong bytes is the failure this matrix exists to rule out
        if kind == "WRONG BYTES":
            violations.append(f"{case.name}: the client got wrong bytes ({outcome.describe()})")
        elif kind.startswith("no response"):
            violations.append(f"{case.name}: {kind}")
        elif kind != case.expect:
            violations.append(f"{case.name}: expected {case.expect}, got {outcome.describe()}")
    print_table(rows)
    assert not violations, "\n".join(violations)


async def test_storage_killed_mid_stream(objects) -> None:
    """The storage server dies while a 24 MiB tensor streams: the client's response is aborted."""
    async with FaultServer() as upstream:
        upstream.put("/big.pt2", objects["/big.pt2"])
        app = make_app([f"big={upstream.url('/big.pt2')}"])
        async with real_server(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            assert (await client.get("/tensors/tiny/data")).status_code == 200
            upstream.faults.append(Drip(chunk_size=256 << 10, interval=0.05, path="/big.pt2"))
            received = bytearray()
            started = time.monotonic()
            with pytest.raises(httpx.RemoteProtocolError):
                async with client.stream("GET", "/tensors/big/data") as response:
                    assert response.status_code == 200
                    async for chunk in response.aiter_raw():
                        received += chunk
                        if len(received) >= 2 << 20 and upstream._server is not None:
                            await upstream.stop()  # killed: listener closed, connections cut
            seconds = time.monotonic() - started
            assert 2 << 20 <= len(received) < BIG
            assert objects["big"].startswith(received)
            print(f"\n| storage server killed mid-stream | aborted | aborted after {len(received):,} of "
                  f"{BIG:,} B (RemoteProtocolError) | - | {seconds:.1f} |")  # fmt: skip
            assert (await client.get("/healthz")).status_code == 200


async def test_client_leaving_during_an_upstream_hang_releases_the_stream(objects) -> None:
    """The storage accepts the request and says nothing. The client gives up after 2 s and closes its
    connection. The service should notice and let go of the stream slot and the upstream request; it
    reads the first chunk before watching for a disconnect, so it waits for the upstream read timeout
    (30 s per attempt, 5 attempts) with the slot held."""
    async with FaultServer() as upstream:
        upstream.put("/big.pt2", objects["/big.pt2"])
        app = make_app([f"big={upstream.url('/big.pt2')}"])
        async with real_server(app) as url, httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/tensors/tiny/data")).status_code == 200
            upstream.faults.append(Hang(path="/big.pt2", method="GET", times=None))
            with pytest.raises(httpx.ReadTimeout):
                await client.get("/tensors/big/data", timeout=2)
            await asyncio.sleep(1.0)
            held = app.state.limiter.active
            waiting = sum(1 for r in upstream.log if r.status is None)
            with contextlib.suppress(Exception):
                await upstream.stop()
        assert held == 0, f"{held} stream slot(s) still held 1 s after the client left"
        assert waiting <= 1
