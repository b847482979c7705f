"""Reading a local archive imports no remote client (the layer order and the absence of import
cycles: tests/test_layers.py)."""

from __future__ import annotations

import pathlib

import pytest

pytestmark = pytest.mark.emulator

ROOT = pathlib.Path(__file__).resolve().parent.parent


REMOTE_ONLY = ("httpx", "h11", "botocore", "google", "azure", "huggingface_hub")


def test_reading_a_local_archive_imports_no_remote_client() -> None:
    """The HTTP clients and cloud SDKs are imported when a remote location is opened: a process that
    reads local archives (the CLI on a file, a service of local archives) never pays their start."""
    import subprocess
    import sys

    archive = ROOT / "tests" / "fixtures" / "archives" / "layouts.pt2"
    script = f"""
import asyncio, sys
import reader

async def main():
    async with reader.open_archive({str(archive)!r}) as ar:
        for t in ar.tensors():
            await ar.read(t.name, model=t.model)

asyncio.run(main())
reader.load({str(archive)!r})
print(" ".join(sorted({{m.split(".")[0] for m in sys.modules}} & set({REMOTE_ONLY!r}))))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"imported for a local archive: {done.stdout.strip()}"
    remote = subprocess.run(
        [sys.executable, "-c", "import reader.sources.http, sys; print('httpx' in sys.modules)"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert remote.stdout.strip() == "True"  # the check sees an import where there is one
