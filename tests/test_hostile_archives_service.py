"""Hostile archives against the real service and the console script (issue 53, item 3).

A real uvicorn (testing/service.py) serves; the archives are files written here. What is measured
is a ratio: `/healthz`'s slowest answer while an archive is being parsed, against how long that
open took (on one event loop the two would be the same).
"""

from __future__ import annotations

import asyncio
import pathlib
import time

import httpx
import pytest

from testing import hostile_pickles as hostile
from testing.cli import cli, one_line_error
from testing.paths import ARCHIVES
from testing.service import assert_json_error, make_app, real_server, run

pytestmark = pytest.mark.emulator


def _write(folder: pathlib.Path, name: str, pickle: bytes) -> pathlib.Path:
    path = folder / name
    path.write_bytes(hostile.checkpoint(pickle))
    return path


async def _archives(client: httpx.AsyncClient) -> list[dict]:
    return (await client.get("/archives")).json()["archives"]


def test_a_configured_hostile_archive_fails_to_open_and_says_why(tmp_path: pathlib.Path) -> None:
    deep = _write(tmp_path, "deep.bin", hostile.nested_tuples(1_000_000))
    app = make_app([f"hostile={deep}", f"layouts={ARCHIVES / 'layouts.pt2'}"])

    async def scenario() -> None:
        async with real_server(app) as base, httpx.AsyncClient(base_url=base, timeout=60) as client:
            listed = {slot["id"]: slot for slot in await _archives(client)}
            assert listed["hostile"]["status"] == "error", listed["hostile"]
            assert "PickleLimitExceeded" in listed["hostile"]["error"], listed["hostile"]
            assert listed["layouts"]["status"] == "open"
            error = assert_json_error(await client.get("/archives/hostile/tensors"), 503)
            assert "nested deeper" in error["message"]

    run(scenario(), timeout=300)


def test_healthz_answers_while_an_opened_archive_parses(tmp_path: pathlib.Path) -> None:
    slow = _write(tmp_path, "slow.bin", hostile.many_items(600))  # legitimate, seconds to list
    app = make_app([f"layouts={ARCHIVES / 'layouts.pt2'}"], allow_open=(f"{tmp_path}/*",))

    async def scenario() -> tuple[float, float]:
        async with real_server(app) as base, httpx.AsyncClient(base_url=base, timeout=120) as client:
            assert (await client.get("/healthz")).status_code == 200
            opening = asyncio.ensure_future(client.post("/archives/open", json={"location": str(slow)}))
            started, slowest = time.perf_counter(), 0.0
            while not opening.done():
                asked = time.perf_counter()
                assert (await client.get("/healthz")).status_code == 200
                slowest = max(slowest, time.perf_counter() - asked)
                await asyncio.sleep(0.01)
            took = time.perf_counter() - started
            answer = await opening
            assert answer.status_code == 200, answer.text
            return took, slowest

    took, slowest = run(scenario(), timeout=300)
    # the open's parse held the event loop on main (/healthz waited for nearly all of it); on a worker
    # thread, only the host's load delays an answer
    assert slowest < took / 2, f"/healthz took {slowest:.3f} s during a {took:.3f} s open"


def test_a_hostile_open_is_a_format_error_and_leaves_nothing_behind(tmp_path: pathlib.Path) -> None:
    deep = _write(tmp_path, "deep.bin", hostile.nested_tuples(1_000_000))
    keys = _write(tmp_path, "pytorch_model.bin", hostile.colliding_int_keys(39_000)[0])
    app = make_app([f"layouts={ARCHIVES / 'layouts.pt2'}"], allow_open=(f"{tmp_path}/*",))

    async def scenario() -> None:
        async with real_server(app) as base, httpx.AsyncClient(base_url=base, timeout=120) as client:
            for path in (deep, keys):
                answer = await client.post("/archives/open", json={"location": str(path)})
                assert assert_json_error(answer, 502)["code"] == "archive_format_error"
            assert [slot["id"] for slot in await _archives(client)] == ["layouts"]
            assert (await client.get("/healthz")).json()["archives"] == {"layouts": "open"}

    run(scenario(), timeout=300)


def test_ls_of_a_hostile_file_is_a_one_line_format_error(tmp_path: pathlib.Path) -> None:
    deep = _write(tmp_path, "deep.bin", hostile.nested_tuples(1_000_000))
    keys = _write(tmp_path, "pytorch_model.bin", hostile.colliding_int_keys(39_000)[0])
    for path, error in ((deep, "pt2serve: PickleLimitExceeded:"), (keys, "pt2serve: MalformedPickle:")):
        result = cli("ls", path)
        assert result.returncode == 1, result.stderr
        one_line_error(result.stderr, error)
        assert "internal error" not in result.stderr
