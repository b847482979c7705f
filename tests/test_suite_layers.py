"""The suite's own rules: every test module names its layer, no test module imports another (shared
helpers live in testing/), and a unit test cannot start a subprocess or open a socket."""

from __future__ import annotations

import ast
import asyncio
import multiprocessing
import socket
import subprocess

import pytest

from testing import layers
from testing.layers import NotAUnitTest, layer_problems, unit_guard
from testing.paths import REPO

pytestmark = pytest.mark.unit

TEST_MODULES = sorted((REPO / "tests").glob("test_*.py"))


def _imported_modules(tree: ast.Module) -> set[str]:
    """Every module an import statement anywhere in `tree` names (`from tests import x` names tests.x)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module == "tests":  # the package: its names are modules
                found.update(f"tests.{alias.name}" for alias in node.names)
    return found


def _is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and len(parts) > 1 and (parts[1].startswith("test_") or parts[1] == "conftest")


def test_no_test_module_imports_another() -> None:
    offenders = {
        path.name: found
        for path in TEST_MODULES
        if (found := sorted(filter(_is_test_module, _imported_modules(ast.parse(path.read_text())))))
    }
    assert not offenders, f"move what they share to testing/: {offenders}"


def test_the_import_check_sees_every_form() -> None:
    tree = ast.parse(
        "from tests.conftest import ARCHIVES\nimport tests.test_cli\nfrom tests import test_versions\n"
        "def f():\n    from tests.test_load import CASES\nfrom testing.fixtures import builders\n"
    )
    assert sorted(filter(_is_test_module, _imported_modules(tree))) == [
        "tests.conftest", "tests.test_cli", "tests.test_load", "tests.test_versions",
    ]  # fmt: skip


def _module_layers(tree: ast.Module) -> set[str]:
    marks = [
        ast.unparse(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets)
    ]
    return {layer for mark in marks for layer in layers.LAYERS if f"pytest.mark.{layer}" in mark}


def test_every_test_module_names_its_layer() -> None:
    unnamed = [path.name for path in TEST_MODULES if not _module_layers(ast.parse(path.read_text()))]
    assert len(TEST_MODULES) > 80 and not unnamed, f"no module-level pytestmark naming a layer: {unnamed}"


def test_a_test_needs_exactly_one_layer_and_unit_stands_alone() -> None:
    problems = layer_problems(
        [
            ("t.py::a", {"unit", "parametrize"}),
            ("t.py::b", {"emulator", "browser"}),
            ("t.py::c", {"skipif"}),
            ("t.py::d", {"unit", "emulator"}),
        ]
    )
    assert [problem.split(":")[2] for problem in problems] == ["c", "d"]
    assert "no layer" in problems[0] and "unit and emulator" in problems[1]


def test_a_unit_test_cannot_start_a_subprocess_or_open_a_socket() -> None:
    # this test is a unit test: the guard of tests/conftest.py is on, and a nested one changes nothing
    with unit_guard():
        with pytest.raises(NotAUnitTest, match="subprocess"):
            subprocess.run(["true"], check=False)
        with pytest.raises(NotAUnitTest, match="subprocess"):
            asyncio.run(asyncio.create_subprocess_exec("true"))
        with pytest.raises(NotAUnitTest):
            multiprocessing.get_context("spawn").Process(target=print).start()
        with socket.socket() as sock, pytest.raises(NotAUnitTest, match="bound"):
            sock.bind(("127.0.0.1", 0))
        with socket.socket() as sock, pytest.raises(NotAUnitTest, match="connected"):
            sock.connect(("127.0.0.1", 9))


def test_the_guard_puts_back_what_it_replaced() -> None:
    before = (subprocess._fork_exec, socket.socket.connect, socket.socket.bind)  # type: ignore[attr-defined]
    with unit_guard():
        assert subprocess._fork_exec is not before[0]  # type: ignore[attr-defined]
    assert (subprocess._fork_exec, socket.socket.connect, socket.socket.bind) == before  # type: ignore[attr-defined]
