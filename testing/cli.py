"""The `pt2serve` console script run for real, as the CLI tests and others drive it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx

import reader
from testing.service import free_port

TIMEOUT = 120


def console_script() -> list[str]:
    """The installed `pt2serve` entry point next to this interpreter, else `python -m app`."""
    script = pathlib.Path(sys.executable).parent / "pt2serve"
    return [str(script)] if script.exists() else [sys.executable, "-m", "app"]


def cli(*args: object, env: dict[str, str] | None = None, cwd: pathlib.Path | None = None):
    """`pt2serve ARGS` run to completion (text output captured, environment extended by `env`)."""
    return subprocess.run(
        [*console_script(), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


async def acli(*args: object, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The same, from async tests (so a server on this loop keeps answering)."""
    proc = await asyncio.create_subprocess_exec(
        *console_script(),
        *map(str, args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    return proc.returncode, out.decode(), err.decode()


def one_line_error(stderr: str, starts: str) -> None:
    """A CLI error is one line starting with `starts`, never a traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(starts), stderr
    assert "Traceback" not in stderr


async def reader_bytes(location, name: str, order: str = "default", model: str | None = None) -> bytes:
    """A tensor's bytes as the library reads them: what the CLI's output is compared with."""
    async with reader.open_archive(location) as ar:
        return await ar.read(name, model=model, order=order)


@contextlib.contextmanager
def serve(specs: list[str], token: str | None = None):
    """`pt2serve serve SPECS` in a subprocess on a free loopback port; yields its URL once /healthz
    answers, and stops it on exit."""
    with serve_process(specs, token=token) as (url, _):
        yield url


@contextlib.contextmanager
def serve_process(
    specs: list[str], *options: str, token: str | None = None, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen]]:
    """`pt2serve serve SPECS OPTIONS` in a subprocess on a free loopback port; yields its URL and
    process once /healthz answers, and stops it on exit. A port taken between its choice and the
    bind (another test's server) is chosen again, a few times at most."""
    env = {**os.environ, "PT2SERVE_REVALIDATE_SECONDS": "0", **(env or {})}
    env.pop("PT2SERVE_API_TOKEN", None)
    if token:
        env["PT2SERVE_API_TOKEN"] = token
    for _ in range(5):
        port = free_port()
        cmd = [sys.executable, "-m", "app", "serve", "--port", str(port), "--log-level", "warning"]
        proc = subprocess.Popen([*cmd, *options, *specs], env=env)
        if _started(proc, f"http://127.0.0.1:{port}"):
            break
        proc.wait(10)
    else:
        raise RuntimeError("the service exited before it answered, five times (see its stderr)")
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        proc.wait(10)


def _started(proc: subprocess.Popen, base: str) -> bool:
    """True once /healthz answers; False if the process ended first (its port was taken)."""
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return True
        if proc.poll() is not None:
            return False
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the service did not start")
        time.sleep(0.1)
