"""The bar for a class in reader/: at most 250 lines and 20 methods, or a paragraph at the top of its
docstring, starting "Why", that says why it must be bigger (issue 55). Parsed, not imported."""

from __future__ import annotations

import ast
import pathlib

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parent.parent
MAX_LINES = 250
MAX_METHODS = 20

KNOWN_EXCEPTIONS: set[str] = set()  # none: a class over the bar says why at its top instead


def over_the_bar(tree: ast.Module, where: str) -> list[str]:
    """The classes of `tree` over the bar whose docstring gives no reason: `where:Name (lines, methods)`."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        methods = sum(isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) for item in node.body)
        if lines <= MAX_LINES and methods <= MAX_METHODS:
            continue
        paragraphs = (ast.get_docstring(node) or "").split("\n\n")
        if len(paragraphs) > 1 and paragraphs[1].startswith("Why"):
            continue
        found.append(f"{where}:{node.name} ({lines} lines, {methods} methods)")
    return found


def test_every_class_in_reader_meets_the_bar_or_says_why() -> None:
    found = []
    for path in sorted((ROOT / "reader").rglob("*.py")):
        found += over_the_bar(ast.parse(path.read_text()), str(path.relative_to(ROOT)))
    assert [item for item in found if item.split(" ")[0] not in KNOWN_EXCEPTIONS] == []


def test_the_check_sees_a_class_over_the_bar_and_a_reason() -> None:
    methods = "".join(f"    def m{i}(self): pass\n" for i in range(MAX_METHODS + 1))
    plain = ast.parse(f"class Big:\n    '''One line.'''\n{methods}")
    reasoned = ast.parse(f"class Big:\n    '''One line.\n\n    Why: one state.'''\n{methods}")
    assert over_the_bar(plain, "x.py") == [f"x.py:Big (23 lines, {MAX_METHODS + 1} methods)"]
    assert over_the_bar(reasoned, "x.py") == []
