"""Shared fixtures: committed archives, their torch-computed expectations, the shared ExecuTorch file."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import pathlib

import pytest

from testing.paths import ARCHIVES  # noqa: F401 - re-exported: the tests import it from here
from testing.provision import ensure_chromium
from testing.seaweed import seaweed_s3  # noqa: F401 - session fixture: a real S3 server on loopback

HERE = pathlib.Path(__file__).resolve().parent
EXPECTED = json.loads((HERE / "fixtures" / "expected.json").read_text())
SHARED_LINEAR = HERE.parent.parent / "shared" / "fixtures" / "linear.pt2"

HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (CI installs torch==2.13.0)")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run(coro, timeout: float = 30.0):
    """Run a coroutine with a hard time bound, so a hang fails instead of blocking the suite."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture(scope="session")
def shared_linear() -> pathlib.Path:
    if not SHARED_LINEAR.exists():
        pytest.skip(f"../shared is absent ({SHARED_LINEAR} not found)")
    return SHARED_LINEAR


@pytest.fixture(scope="session")
def fresh_archives(tmp_path_factory) -> tuple[pathlib.Path, dict]:
    """Archives generated now by the installed torch, with torch's own expectations."""
    if not HAVE_TORCH:
        pytest.skip("torch is not installed (CI installs torch==2.13.0)")
    from tests.fixtures import make_fixtures

    out = tmp_path_factory.mktemp("fresh")
    return out, make_fixtures.build_all(out)


CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium for one test module: Debian's, installed on first use (testing/provision.py;
    Playwright drives it, `playwright install` cannot download browsers here)."""
    from playwright.sync_api import sync_playwright

    executable = ensure_chromium()
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
