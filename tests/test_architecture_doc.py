"""docs/architecture.md's tree of the code matches the code (issue 48): every package of reader/
and app/ is in it, every module is named in it, and every file it names exists."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parent.parent
TREE = (ROOT / "docs" / "architecture.md").read_text().split("```", 2)[1]  # the first code block
CODE = [path for package in ("reader", "app") for path in (ROOT / package).rglob("*.py")]


def test_every_package_is_in_the_tree() -> None:
    named = set(re.findall(r"(\w+)/", TREE))
    packages = {path.parent for path in CODE if path.name == "__init__.py"}
    assert sorted(str(p.relative_to(ROOT)) for p in packages if p.name not in named) == []


def test_every_module_is_named_in_the_tree() -> None:
    words = set(re.findall(r"\w+", TREE))
    modules = [path for path in CODE if path.name not in ("__init__.py", "__main__.py")]
    assert sorted(str(p.relative_to(ROOT)) for p in modules if p.stem not in words) == []


def test_every_file_the_tree_names_exists() -> None:
    files = {path.stem for path in ROOT.rglob("*.py") if ".git" not in path.parts}
    assert sorted(set(re.findall(r"(\w+)\.py\b", TREE)) - files) == []


def test_every_package_docstring_is_there_and_names_only_modules_that_exist() -> None:
    stale = []
    for init in (path for path in CODE if path.name == "__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        if not doc.strip():
            stale.append(f"{init.relative_to(ROOT)}: no docstring")
        for name in re.findall(r"([\w/]+)\.py\b", doc):
            if "/" in name:  # a path from the top of the repository
                missing = not (ROOT / f"{name}.py").exists()
            else:  # a module of this package, or one it speaks of elsewhere in the code
                missing = not any(path.stem == name for path in CODE)
            if missing:
                stale.append(f"{init.relative_to(ROOT)} names {name}.py")
    assert stale == []


def test_a_remote_whole_load_names_one_module_a_step() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## A remote whole load, step by step", 1)[1].split("\n## ", 1)[0]
    steps = [line for line in section.splitlines() if re.match(r"\| \d+\. ", line)]
    assert len(steps) >= 10
    for step in steps:
        modules = re.findall(r"`((?:reader|app)/[\w/]+\.py)`", step)
        assert len(modules) == 1 and (ROOT / modules[0]).exists(), step
