"""`pt2serve diff A B`: the table, JSON, progress, and diff(1)'s exit statuses."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from app.cli import main
from testing.paths import ARCHIVES
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator

FLOAT32 = 7


def _pair(tmp_path, elements: int = 6):
    x = np.arange(elements, dtype=np.float32)
    y = x.copy()
    y[1] = 9
    write_pt2(
        tmp_path / "a.pt2", {"enc.w": (FLOAT32, [elements], x.tobytes()), "old": (FLOAT32, [1], b"\0" * 4)}
    )
    write_pt2(
        tmp_path / "b.pt2", {"enc.w": (FLOAT32, [elements], y.tobytes()), "new": (FLOAT32, [2], b"\0" * 8)}
    )
    return str(tmp_path / "a.pt2"), str(tmp_path / "b.pt2")


def test_identical_archives_exit_0(capsys):
    path = str(ARCHIVES / "layouts.pt2")
    assert main(["diff", path, path]) == 0
    assert capsys.readouterr().out.startswith("identical: 14 same")


def test_different_archives_exit_1_with_a_table(tmp_path, capsys):
    a, b = _pair(tmp_path)
    assert main(["diff", a, b]) == 1
    out = capsys.readouterr().out
    assert "changed  enc.w" in out and "added    new" in out and "removed  old" in out
    assert "1 changed, 1 added, 1 removed" in out


def test_json_and_prefix(tmp_path, capsys):
    a, b = _pair(tmp_path)
    assert main(["diff", a, b, "--prefix", "enc.", "--json"]) == 1
    body = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in body["tensors"]] == ["enc.w"]
    assert body["tensors"][0]["figures"]["max_abs_diff"] == 8.0
    assert main(["diff", a, b, "--prefix", "none.", "--json"]) == 0


def test_trouble_exits_2(tmp_path, capsys):
    a, _ = _pair(tmp_path)
    assert main(["diff", a, str(tmp_path / "missing.pt2")]) == 2
    assert "pt2serve:" in capsys.readouterr().err
    assert main(["diff", a, str(ARCHIVES / "legacy.pt2")]) == 2  # opens refused: trouble, not "differ"
    process = subprocess.run([sys.executable, "-m", "app", "diff", a], capture_output=True, text=True)
    assert process.returncode == 2 and "required" in process.stderr


def test_progress_on_stderr_when_asked(tmp_path, capsys):
    a, b = _pair(tmp_path, elements=1 << 20)  # 4 MiB a side: read whole
    assert main(["diff", a, b, "--progress"]) == 1
    assert "compared" in capsys.readouterr().err
