"""Where the committed test archives live, for tests, benches and scripts alike (none of which
imports from tests/)."""

from __future__ import annotations

import pathlib

REPO = pathlib.Path(__file__).resolve().parent.parent
ARCHIVES = REPO / "tests" / "fixtures" / "archives"
