"""The layers docs/architecture.md draws hold in the code: a module of reader/ or app/ imports only
from its own layer and the layers below it, and nothing imports in a cycle.

The order is one table, "The layer order" in docs/architecture.md, parsed here: the doc and the test
cannot disagree. Every import counts, wherever it stands (module level, inside a function, under
TYPE_CHECKING): an annotation that names a class of a layer above is still a module that knows of
that layer, and the next change turns it into a runtime import.
"""

from __future__ import annotations

import re

import pytest

from testing import import_graph

pytestmark = pytest.mark.unit

DOC = import_graph.ROOT / "docs" / "architecture.md"

# Imports the table forbids that another branch of issue 55 removes; the lead deletes each line at merge.
KNOWN_EXCEPTIONS: set[tuple[str, str]] = set()


def layer_table(text: str) -> list[list[str]]:
    """The rows of the "The layer order" table, bottom up: each a list of paths (`reader/x.py`, or
    `reader/x/` for a package and all below it)."""
    section = text.split("### The layer order", 1)[1].split("\n#", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].isdigit():
            assert int(cells[0]) == len(rows) + 1, f"layers numbered out of order at {cells[0]}"
            rows.append(re.findall(r"`([^`]+)`", cells[1]))
    return rows


def module_layers(rows: list[list[str]], modules: dict[str, object]) -> dict[str, int]:
    """Each module's layer (its index in `rows`), by the row that names its file or a package above
    it; the longest such path wins, so a row may carve a module out of a package's layer."""
    found = {}
    for name, path in modules.items():
        relative = str(path.relative_to(import_graph.ROOT))  # type: ignore[attr-defined]
        matches = [
            (len(entry), index)
            for index, row in enumerate(rows)
            for entry in row
            if relative == entry or (entry.endswith("/") and relative.startswith(entry))
        ]
        if matches:
            found[name] = max(matches)[1]
    return found


def upward_imports(edges: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    """Each import of a module from a layer above its own, as `importer (layer) -> imported (layer)`."""
    return sorted(
        f"{source} ({layers[source] + 1}) -> {target} ({layers[target] + 1})"
        for source, targets in edges.items()
        for target in targets
        if layers[target] > layers[source] and (source, target) not in KNOWN_EXCEPTIONS
    )


ROWS = layer_table(DOC.read_text())
MODULES = import_graph.modules()
EDGES = import_graph.graph()


def test_the_doc_draws_the_layers() -> None:
    assert len(ROWS) >= 10
    assert ROWS[-1] == ["app/"]
    named = [entry for row in ROWS for entry in row]
    assert len(named) == len(set(named)), "a path in two rows"
    missing = [entry for entry in named if not (import_graph.ROOT / entry).exists()]
    assert missing == [], f"the table names what does not exist: {missing}"


def test_every_module_is_in_one_layer() -> None:
    layers = module_layers(ROWS, MODULES)
    assert sorted(set(MODULES) - set(layers)) == [], "modules in no layer of docs/architecture.md"


def test_nothing_imports_from_a_layer_above() -> None:
    layers = module_layers(ROWS, MODULES)
    assert EDGES["reader.archives.archive"]  # the parse sees imports at all
    assert upward_imports(EDGES, layers) == []


def test_each_known_exception_is_still_an_upward_import() -> None:
    """A known exception that no longer happens is deleted from the list, not kept as a licence."""
    layers = module_layers(ROWS, MODULES)
    for source, target in KNOWN_EXCEPTIONS:
        assert target in EDGES.get(source, set()) and layers[target] > layers[source], (source, target)


def test_the_check_finds_an_upward_import() -> None:
    """TYPE_CHECKING and function-level imports count: a relative import under TYPE_CHECKING from a
    higher layer is found, one from below is not."""
    text = "### The layer order\n\n| 1 | `low/` | x |\n| 2 | `high/` `top.py` | y |\n"
    rows = layer_table(text)
    assert rows == [["low/"], ["high/", "top.py"]]
    edges = {"low.a": {"high.b"}, "high.b": {"low.a"}, "top": {"low.a", "high.b"}}
    layers = {"low.a": 0, "high.b": 1, "top": 1}
    assert upward_imports(edges, layers) == ["low.a (1) -> high.b (2)"]


def test_the_parse_counts_type_checking_and_function_imports(tmp_path) -> None:  # type: ignore[no-untyped-def]
    package = tmp_path / "reader" / "low"
    package.mkdir(parents=True)
    (tmp_path / "app").mkdir()
    (tmp_path / "reader" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (tmp_path / "reader" / "high.py").write_text("X = 1\n")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..high import X\n"
        "def f():\n    from reader import high\n"
    )
    edges = import_graph.graph(tmp_path)
    assert edges["reader.low.a"] == {"reader.high"}


def test_reader_and_app_have_no_import_cycle() -> None:
    assert {"app.cli_errors", "reader", "reader.cache"} <= EDGES["app.cli"]  # relative, absolute
    cycle = import_graph.cycle(EDGES)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_the_check_finds_a_cycle() -> None:
    assert import_graph.cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert import_graph.cycle({"a": {"b"}, "b": set()}) is None
