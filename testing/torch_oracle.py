"""torch as the tests' oracle: whether it is here, and what it computed for the committed archives."""

from __future__ import annotations

import importlib.util
import json

import pytest

from testing.paths import EXPECTED_JSON

HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (CI installs torch==2.13.0)")

# archive file name -> what torch read from it: models, tensors, ... (testing/fixtures/make_fixtures.py)
EXPECTED: dict = json.loads(EXPECTED_JSON.read_text())
