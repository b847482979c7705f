"""`pt2serve diff A B`'s trouble status 2, down to argparse's in the console script (a subprocess). The
table, JSON, progress and the other exit statuses are in test_compare_cli_rules.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.cli import main
from testing.diff_archives import pair
from testing.paths import ARCHIVES

pytestmark = pytest.mark.emulator


def test_trouble_exits_2(tmp_path, capsys):
    a, _ = pair(tmp_path)
    assert main(["diff", a, str(tmp_path / "missing.pt2")]) == 2
    assert "pt2serve:" in capsys.readouterr().err
    assert main(["diff", a, str(ARCHIVES / "legacy.pt2")]) == 2  # opens refused: trouble, not "differ"
    process = subprocess.run([sys.executable, "-m", "app", "diff", a], capture_output=True, text=True)
    assert process.returncode == 2 and "required" in process.stderr
