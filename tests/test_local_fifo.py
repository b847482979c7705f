"""A FIFO is refused at once, never waited on: in a child process, so a regression fails on a timeout
instead of hanging pytest (the rest of LocalFileSource: test_local_source.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from testing.paths import REPO

pytestmark = pytest.mark.emulator


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path) -> None:
    # opening a FIFO waits for a writer; the open runs on the event loop, so it must not wait.
    # In a child process, so that a regression fails on the timeout instead of hanging pytest.
    os.mkfifo(tmp_path / "fifo.pt2")
    script = (
        "import asyncio, sys, reader\n"
        "from reader.sources import LocalFileSource\n"
        "try:\n"
        "    asyncio.run(LocalFileSource.open(sys.argv[1]))\n"
        "except reader.SourceError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "fifo.pt2")], cwd=REPO,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "is not a regular file" in done.stdout, done.stderr
