"""app/ uses only what reader documents as public: the modules docs/api.md lists ("The modules app/
builds on"), and of each only the names in its `__all__`.

Every import of reader in app/ counts, wherever it stands (module level or in a function). A module
imported whole (`from reader.formats import ptd`) must be listed; its attributes are not followed.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import re

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parent.parent
LISTED = re.compile(r"^\| `(reader(?:\.\w+)*)` \|", re.MULTILINE)


def documented_modules() -> set[str]:
    return set(LISTED.findall((ROOT / "docs" / "api.md").read_text()))


def reader_imports(tree: ast.AST) -> list[tuple[str, str | None, int]]:
    """(module, name or None for the module itself, line) of each import of reader."""
    found: list[tuple[str, str | None, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names if _ours(alias.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and _ours(node.module or ""):
            found += [(node.module or "", alias.name, node.lineno) for alias in node.names]
    return found


def _ours(module: str) -> bool:
    return module.split(".")[0] == "reader"


def undocumented(module: str, name: str | None, listed: set[str]) -> str | None:
    """Why importing `name` from `module` (or `module` itself) is not public, or None."""
    if name is not None and f"{module}.{name}" in listed:
        return None  # a listed module, imported from its package
    if module not in listed:
        return f"{module} is not a documented module"
    if name is None:
        return None
    exported = getattr(importlib.import_module(module), "__all__", ())
    return None if name in exported else f"{name} is not in {module}.__all__"


def test_the_docs_list_modules() -> None:
    listed = documented_modules()
    assert {"reader", "reader.torch", "reader.sources", "reader.formats.npy"} <= listed
    for module in listed:
        importlib.import_module(module)  # each exists


def test_app_imports_only_what_reader_documents() -> None:
    listed = documented_modules()
    problems = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        for module, name, line in reader_imports(ast.parse(path.read_text(), str(path))):
            why = undocumented(module, name, listed)
            if why:
                problems.append(f"{path.relative_to(ROOT)}:{line}: {why}")
    assert not problems, "make it public (exported, in docs/api.md) or do not use it:\n" + "\n".join(problems)


def test_the_check_refuses_internals() -> None:
    listed = {"reader", "reader.sources", "reader.formats", "reader.formats.npy"}
    assert undocumented("reader.sources.base", "fresh_buffer", listed) == (
        "reader.sources.base is not a documented module"
    )
    assert undocumented("reader.sources", "is_remote", listed) is None
    assert undocumented("reader.sources", "open_source", listed) is None
    refused = undocumented("reader.sources", "check_range", listed)
    assert refused == "check_range is not in reader.sources.__all__"
    assert undocumented("reader.formats", "npy", listed) is None
    assert undocumented("reader", None, listed) is None
    code = "import reader\nfrom reader.sources import HttpOptions\nfrom .x import y\nimport os\n"
    assert reader_imports(ast.parse(code)) == [("reader", None, 1), ("reader.sources", "HttpOptions", 2)]
