"""The import graph of reader/ and app/, parsed from the source (no module imported): every import
counts, wherever it stands (module level, inside a function, under TYPE_CHECKING). Relative imports
are resolved against the importing module's package; `from package import x` names module x where
there is one. Used by tests/test_layers.py (the layer order, no cycle) and tests/test_imports.py."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("reader", "app")


def modules(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
    """Every module of reader/ and app/ by dotted name (a package by its own name)."""
    found = {}
    for path in (path for package in PACKAGES for path in (root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(name: str, path: pathlib.Path, known: dict[str, pathlib.Path]) -> set[str]:
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
                f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in known else stem for alias in node.names
            )
    return {target for target in targets if target in known and target != name}


def graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    """Each module of reader/ and app/ -> the modules of ours it imports."""
    known = modules(root)
    return {name: imports(name, path, known) for name, path in known.items()}


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `edges` as the modules along it, or None (a depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None
