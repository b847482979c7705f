"""One HTTP/1.1 client in the tree (issue 48): every request of reader/ and app/ goes through httpx
over reader/sources/transport/http1/ (or httpx's own HTTP/2 transport on request); no other client library is
imported, h11 is spoken only in http1/, and only `make_client` builds an httpx client or transport."""

from __future__ import annotations

import ast
import pathlib

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parent.parent
OTHER_CLIENTS = {"aiohttp", "httpcore", "urllib3", "requests", "pycurl", "http.client", "urllib.request"}
HTTP1 = ROOT / "reader" / "sources" / "transport" / "http1"
MAKER = ROOT / "reader" / "sources" / "http.py"


def _sources() -> list[pathlib.Path]:
    return sorted(path for package in ("reader", "app") for path in (ROOT / package).rglob("*.py"))


def _imported(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
    return names


def _uses(tree: ast.AST, module: str, attribute: str) -> bool:
    return any(
        isinstance(node, ast.Attribute)
        and node.attr == attribute
        and isinstance(node.value, ast.Name)
        and node.value.id == module
        for node in ast.walk(tree)
    )


def test_no_other_http_client_is_imported_and_h11_only_in_http1() -> None:
    found = []
    for path in _sources():
        imported = _imported(ast.parse(path.read_text(), str(path)))
        clients = {name for name in imported if name in OTHER_CLIENTS or name.split(".")[0] in OTHER_CLIENTS}
        if clients:
            found.append(f"{path.relative_to(ROOT)} imports {sorted(clients)}")
        if "h11" in imported and HTTP1 not in path.parents:
            found.append(f"{path.relative_to(ROOT)} speaks h11 outside reader/sources/transport/http1/")
    assert found == []


def test_only_make_client_builds_an_httpx_client_or_transport() -> None:
    built = [
        f"{path.relative_to(ROOT)}: httpx.{name}"
        for path in _sources()
        if path != MAKER
        for name in ("AsyncClient", "Client", "AsyncHTTPTransport", "HTTPTransport")
        if _uses(ast.parse(path.read_text(), str(path)), "httpx", name)
        and f"httpx.{name}(" in path.read_text()
    ]
    assert built == []
