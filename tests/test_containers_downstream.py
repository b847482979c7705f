"""Checkpoints and AOTInductor packages through the CLI (a subprocess): ls/layout/get, and its exit
status when nothing is readable. The service's routes are in test_containers_downstream_rules.py."""

from __future__ import annotations

import json

import pytest

from testing.cli import cli
from testing.container_truth import CHECKPOINT, MIXED, VERSION
from testing.paths import CONTAINERS

pytestmark = pytest.mark.emulator


SO_ONLY = CONTAINERS / VERSION / "aoti_so.pt2"


def test_cli_ls_get_layout_on_a_checkpoint(tmp_path) -> None:
    listed = cli("ls", CHECKPOINT, "--json")
    assert listed.returncode == 0, listed.stderr
    body = json.loads(listed.stdout)
    assert body["container"] == "checkpoint"
    assert "model.fc.weight" in {t["name"] for t in body["tensors"]}
    layout = cli("layout", CHECKPOINT, "extras.transposed")
    assert json.loads(layout.stdout)["strides"] == [1, 8]
    out = tmp_path / "fc.bin"
    got = cli("get", CHECKPOINT, "model.fc.weight", "-o", out)
    assert got.returncode == 0, got.stderr
    assert out.stat().st_size == 6 * 4 * 4


def test_cli_ls_exits_non_zero_when_nothing_is_readable() -> None:
    so_only = cli("ls", SO_ONLY)
    assert so_only.returncode == 1
    assert "AOTInductor" in so_only.stderr and "wrapper.cpp" in so_only.stderr
    mixed = cli("ls", MIXED)
    assert mixed.returncode == 0
    assert "fc.weight" in mixed.stdout and "aoti/model" in mixed.stderr
    legacy = cli("ls", CONTAINERS / VERSION / "legacy.pt")
    assert legacy.returncode == 1 and "legacy torch.save" in legacy.stderr
