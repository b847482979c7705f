"""The suite's layers (pyproject's markers): every test names its layer, and a unit test stays one.

`python -m pytest -m unit` is the inner loop, so a unit test must need nothing but this process:
`unit_guard` makes starting a subprocess (subprocess, asyncio, multiprocessing, os.fork) or
binding/connecting a socket raise `NotAUnitTest` for the test's duration, set-up and fixtures
included, so a server hiding in a fixture shows at once instead of slowing the loop down.
"""

from __future__ import annotations

import _posixsubprocess
import contextlib
import os
import socket
import subprocess
from collections.abc import Iterable, Iterator

LAYERS = ("unit", "emulator", "browser", "image", "heavy")


class NotAUnitTest(RuntimeError):
    """A test marked `unit` started a subprocess or used the network: mark it by what it needs."""


def layer_problems(items: Iterable[tuple[str, set[str]]]) -> list[str]:
    """What is wrong with the layers of (test id, its marker names): none named, or unit with another."""
    problems = []
    for nodeid, names in items:
        layers = names.intersection(LAYERS)
        if not layers:
            problems.append(f"{nodeid}: no layer (pytestmark = pytest.mark.unit, emulator, browser, ...)")
        elif "unit" in layers and len(layers) > 1:
            problems.append(f"{nodeid}: unit and {', '.join(sorted(layers - {'unit'}))} at once")
    return problems


def _refuse(what: str):
    def refused(*args: object, **kwargs: object):
        raise NotAUnitTest(f"a unit test {what}: mark it emulator (or the layer it needs)")

    return refused


@contextlib.contextmanager
def unit_guard() -> Iterator[None]:
    """Subprocesses and sockets refused while the block runs (every thread: a server in a thread too)."""
    patches = [
        (_posixsubprocess, "fork_exec", _refuse("started a subprocess")),  # multiprocessing's spawn
        (subprocess, "_fork_exec", _refuse("started a subprocess")),  # subprocess's own reference
        (os, "fork", _refuse("forked")),
        (os, "posix_spawn", _refuse("started a subprocess")),
        (socket.socket, "bind", _refuse("bound a socket")),
        (socket.socket, "connect", _refuse("connected a socket")),
        (socket.socket, "connect_ex", _refuse("connected a socket")),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, replacement in patches:
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
