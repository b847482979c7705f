"""The import graph of reader/ and app/ has no cycle: data flows down the layers, nothing reaches up.

Every import counts, wherever it stands (module level, inside a function, under TYPE_CHECKING): a
cycle hidden in a function is still two modules that each need the other. Relative imports are
resolved against the importing module's package; `from package import x` names module x where
there is one.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

pytestmark = pytest.mark.emulator

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("reader", "app")


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in (path for package in PACKAGES for path in (ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The modules of ours `name` imports (a `from package import x` names module x if there is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets.update(
                f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in modules else stem for alias in node.names
            )
    return {target for target in targets if target in modules and target != name}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as the modules along it, or None (a depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_reader_and_app_have_no_import_cycle() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert graph["reader.archives.archive"]  # the parse sees imports at all
    assert {"app.cli_errors", "reader", "reader.cache"} <= graph["app.cli"]  # relative, absolute
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_the_check_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


REMOTE_ONLY = ("httpx", "h11", "botocore", "google", "azure", "huggingface_hub")


def test_reading_a_local_archive_imports_no_remote_client() -> None:
    """The HTTP clients and cloud SDKs are imported when a remote location is opened: a process that
    reads local archives (the CLI on a file, a service of local archives) never pays their start."""
    import subprocess
    import sys

    archive = ROOT / "tests" / "fixtures" / "archives" / "layouts.pt2"
    script = f"""
import asyncio, sys
import reader

async def main():
    async with reader.open_archive({str(archive)!r}) as ar:
        for t in ar.tensors():
            await ar.read(t.name, t.model)

asyncio.run(main())
reader.load({str(archive)!r})
print(" ".join(sorted({{m.split(".")[0] for m in sys.modules}} & set({REMOTE_ONLY!r}))))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"imported for a local archive: {done.stdout.strip()}"
    remote = subprocess.run(
        [sys.executable, "-c", "import reader.sources.http, sys; print('httpx' in sys.modules)"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert remote.stdout.strip() == "True"  # the check sees an import where there is one
