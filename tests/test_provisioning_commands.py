"""testing/provision.py's commands, built without running them: every apt-get waits for the dpkg lock
(provisioning run for real: test_provisioning.py)."""

from __future__ import annotations

import pytest

from testing import provision

pytestmark = pytest.mark.unit


def test_every_apt_get_waits_for_the_dpkg_lock() -> None:
    command = provision.apt_get("install", "-y", "chromium")
    assert command[0] == "apt-get" and command[-3:] == ["install", "-y", "chromium"]
    assert f"DPkg::Lock::Timeout={provision.DPKG_LOCK_TIMEOUT}" in command
    assert command[command.index(f"DPkg::Lock::Timeout={provision.DPKG_LOCK_TIMEOUT}") - 1] == "-o"
