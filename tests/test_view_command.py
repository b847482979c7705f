"""`pt2serve view` as a user runs it: a subprocess with a browser stand-in (the BROWSER variable Python's
webbrowser reads: a script writing the URL it was given to a file). The URL names the archive (or the
compare view of two), the page and the archive behind it serve, and SIGINT ends it with exit 0.
An http(s) location works as a path does; a location that cannot open ends it with status 1."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from testing.faultserver import FaultServer
from testing.paths import ARCHIVES

pytestmark = pytest.mark.emulator

ROOT = pathlib.Path(__file__).resolve().parent.parent


def stand_in_browser(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    got = tmp_path / "browser-got.txt"
    script = tmp_path / "browser.sh"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> "{got}"\n')
    script.chmod(0o755)
    return script, got


def start_view(
    tmp_path: pathlib.Path, *arguments: str, browser: bool = True
) -> tuple[subprocess.Popen, pathlib.Path]:
    script, got = stand_in_browser(tmp_path)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "BROWSER": str(script),
        "PT2SERVE_CACHE_DIR": str(tmp_path / "c"),
    }
    command = [sys.executable, "-m", "app", "view", *arguments] + ([] if browser else ["--no-browser"])
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return process, got


def wait_for(got: pathlib.Path, process: subprocess.Popen, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while not (got.exists() and got.read_text().strip()):
        if process.poll() is not None:
            raise AssertionError(f"view exited {process.returncode}: {process.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError("the browser stand-in was never started")
        time.sleep(0.05)
    return got.read_text().strip()


def interrupt(process: subprocess.Popen) -> tuple[int, str, str]:
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    return process.returncode, out, err


def test_view_opens_the_browser_on_the_archive_and_stops_on_sigint(tmp_path):
    process, got = start_view(tmp_path, str(ARCHIVES / "layouts.pt2"))
    try:
        url = wait_for(got, process)
        base, fragment = url.split("#", 1)
        assert base.startswith("http://127.0.0.1:") and fragment == "/archive/layouts"
        page = httpx.get(base)
        assert page.status_code == 200 and "pt2serve viewer" in page.text
        listing = httpx.get(f"{base}archives/layouts/tensors").json()
        assert len(listing["tensors"]) == 14
    finally:
        status, out, err = interrupt(process)
    assert status == 0, err
    assert url in out  # printed as well
    assert got.read_text().strip() == url  # opened once


def test_view_of_two_archives_opens_the_compare_view(tmp_path):
    process, got = start_view(tmp_path, str(ARCHIVES / "layouts.pt2"), str(ARCHIVES / "dtypes.pt2"))
    try:
        url = wait_for(got, process)
        base, fragment = url.split("#", 1)
        assert fragment == "/compare/layouts/dtypes"
        compared = httpx.get(f"{base}archives/layouts/compare/dtypes")
        assert compared.status_code == 200 and "summary" in compared.json()
    finally:
        status, _, err = interrupt(process)
    assert status == 0, err


def test_view_of_the_same_name_twice_names_them_apart(tmp_path):
    (tmp_path / "v2").mkdir()
    copy = tmp_path / "v2" / "layouts.pt2"
    copy.write_bytes((ARCHIVES / "layouts.pt2").read_bytes())
    process, got = start_view(tmp_path, str(ARCHIVES / "layouts.pt2"), str(copy))
    try:
        url = wait_for(got, process)
        assert url.endswith("#/compare/layouts/layouts-2")
        summary = httpx.get(url.split("#")[0] + "archives/layouts/compare/layouts-2").json()["summary"]
        assert summary["identical"] is True
    finally:
        interrupt(process)


@pytest.fixture
def origin():
    """The FaultServer serving layouts.pt2 on a loop of its own (the command is another process)."""
    loop = asyncio.new_event_loop()
    server = FaultServer()
    server.put("/models/layouts.pt2", (ARCHIVES / "layouts.pt2").read_bytes())
    loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.run_until_complete(server.stop())
        loop.close()


def test_view_of_an_http_location_with_no_browser(tmp_path, origin):
    location = origin.url("/models/layouts.pt2")
    process, got = start_view(tmp_path, location, browser=False)
    try:
        line = process.stdout.readline()
        url = line.split()[2]
        assert url.endswith("#/archive/layouts")
        listing = httpx.get(url.split("#")[0] + "archives").json()["archives"][0]
        assert listing["location"] == location and listing["status"] == "open"
    finally:
        status, _, err = interrupt(process)
    assert status == 0, err
    assert not got.exists()  # --no-browser: no browser started


def test_view_reads_through_cache_dir_and_then_offline(tmp_path, origin):
    location = origin.url("/models/layouts.pt2")
    cache = tmp_path / "cache"
    for mode in ([], ["--offline"]):
        before = len(origin.log)
        process, _ = start_view(tmp_path, location, "--cache-dir", str(cache), *mode, browser=False)
        try:
            url = process.stdout.readline().split()[2]
            names = [
                t["name"] for t in httpx.get(url.split("#")[0] + "archives/layouts/tensors").json()["tensors"]
            ]
            assert len(names) == 14
        finally:
            status, _, err = interrupt(process)
        assert status == 0, err
        if mode:
            assert len(origin.log) == before  # offline: not one request to the origin


def test_view_of_a_location_that_cannot_open_fails(tmp_path):
    missing = tmp_path / "missing.pt2"
    process, got = start_view(tmp_path, str(missing))
    _, err = process.communicate(timeout=60)
    assert process.returncode == 1
    assert "missing" in err and not got.exists()
