"""`pt2serve view`'s page URL quotes archive ids (the command run for real: test_view_command.py)."""

from __future__ import annotations

import urllib.parse

import pytest

pytestmark = pytest.mark.unit


def test_view_url_quotes_ids():
    from app.cli_view import page_url, view_specs

    specs = view_specs(["/models/a b.pt2", "hf://org/model/c.pt2"])
    assert [s.id for s in specs] == ["a b", "c"]
    assert page_url(8000, specs) == "http://127.0.0.1:8000/#/compare/a%20b/c"
    assert urllib.parse.unquote(page_url(8000, specs[:1]).split("/")[-1]) == "a b"
