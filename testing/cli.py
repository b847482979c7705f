"""The `pt2serve` console script run for real, as the CLI tests and others drive it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import subprocess
import sys
import time

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
        return await ar.read(name, model, order=order)


@contextlib.contextmanager
def serve(specs: list[str], token: str | None = None):
    """`pt2serve serve SPECS` in a subprocess on a free loopback port; yields its URL once /healthz
    answers, and stops it on exit."""
    port = free_port()
    env = {**os.environ, "PT2SERVE_REVALIDATE_SECONDS": "0"}
    env.pop("PT2SERVE_API_TOKEN", None)
    if token:
        env["PT2SERVE_API_TOKEN"] = token
    cmd = [sys.executable, "-m", "app", "serve", "--port", str(port), "--log-level", "warning", *specs]
    proc = subprocess.Popen(cmd, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the service did not start")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)
