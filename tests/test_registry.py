"""The registry of open archives: a reopen replaces an archive once, whoever reports it stale."""

from __future__ import annotations

import shutil

import pytest

from app.registry import Registry
from app.settings import Settings, parse_archive_specs
from testing.paths import ARCHIVES

pytestmark = pytest.mark.unit


async def test_a_late_failure_of_an_old_version_does_not_close_its_replacement(tmp_path) -> None:
    path = tmp_path / "a.pt2"
    shutil.copy(ARCHIVES / "layouts.pt2", path)
    registry = Registry(Settings(archives=parse_archive_specs([f"a={path}"]), revalidate_seconds=0))
    await registry.start()
    try:
        old = await registry.get("a")
        await registry.reopen("a", stale=old)  # the first request to see the change reopens
        new = await registry.get("a")
        assert new is not old
        await registry.reopen("a", stale=old)  # a late failure from a request still reading `old`
        assert await registry.get("a") is new
        assert len(await new.read("transposed")) == new.layout("transposed").nbytes  # still open
    finally:
        await registry.close()
