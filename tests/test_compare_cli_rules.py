"""`pt2serve diff A B` run in this process (app.cli.main): the table, JSON, progress, and diff(1)'s exit
statuses. The console script in a subprocess is in test_compare_cli.py."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from testing.diff_archives import pair
from testing.paths import ARCHIVES

pytestmark = pytest.mark.unit


def test_identical_archives_exit_0(capsys):
    path = str(ARCHIVES / "layouts.pt2")
    assert main(["diff", path, path]) == 0
    assert capsys.readouterr().out.startswith("identical: 14 same")


def test_different_archives_exit_1_with_a_table(tmp_path, capsys):
    a, b = pair(tmp_path)
    assert main(["diff", a, b]) == 1
    out = capsys.readouterr().out
    assert "changed  enc.w" in out and "added    new" in out and "removed  old" in out
    assert "1 changed, 1 added, 1 removed" in out


def test_json_and_prefix(tmp_path, capsys):
    a, b = pair(tmp_path)
    assert main(["diff", a, b, "--prefix", "enc.", "--json"]) == 1
    body = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in body["tensors"]] == ["enc.w"]
    assert body["tensors"][0]["figures"]["max_abs_diff"] == 8.0
    assert main(["diff", a, b, "--prefix", "none.", "--json"]) == 0


def test_progress_on_stderr_when_asked(tmp_path, capsys):
    a, b = pair(tmp_path, elements=1 << 20)  # 4 MiB a side: read whole
    assert main(["diff", a, b, "--progress"]) == 1
    assert "compared" in capsys.readouterr().err
