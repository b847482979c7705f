"""Shared fixtures (the shared ExecuTorch file, freshly generated archives, Chromium) and the layers'
rules: every test names its layer, and a unit test starts no subprocess and opens no socket
(testing/layers.py). Helpers the test modules share live in testing/, never here."""

from __future__ import annotations

import contextlib
import pathlib

import pytest

from testing.layers import layer_problems, unit_guard
from testing.paths import SHARED_LINEAR
from testing.provision import ensure_chromium
from testing.seaweed import seaweed_s3  # noqa: F401 - session fixture: a real S3 server on loopback
from testing.torch_oracle import HAVE_TORCH


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problems = layer_problems((item.nodeid, {m.name for m in item.iter_markers()}) for item in items)
    if problems:
        shown = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise pytest.UsageError(f"tests without a single layer (pyproject's markers):\n  {shown}{more}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    with _guarded(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    with _guarded(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    with _guarded(item):
        yield


def _guarded(item: pytest.Item) -> contextlib.AbstractContextManager:
    return unit_guard() if item.get_closest_marker("unit") else contextlib.nullcontext()


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
    from testing.fixtures import make_fixtures

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
