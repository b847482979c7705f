"""Benchmark figures live in bench/README.md only (issue 55): the comments and docstrings of reader/
and app/ say why in words. A figure in code goes stale the day the code or the host changes, and
bench/README.md is where each is measured against its baseline and rerun."""

from __future__ import annotations

import ast
import io
import pathlib
import re
import tokenize

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parent.parent
# A ratio (1.4x, 0.66x), a rate, or a duration in ms or µs: what a measurement reports.
FIGURE = re.compile(r"\b\d+(\.\d+)?x\b(?! ?\d)|[MG]i?B/s\b|\b\d+(\.\d+)? ?(ms|µs|us)\b")
VERSIONS = {"0.16x"}  # FastAPI 0.16x: a version, not a ratio


def prose(source: str) -> list[tuple[int, str]]:
    """The comments and docstrings of a module, each with its first line."""
    found = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            if docstring is not None:
                found.append((node.body[0].lineno, docstring))
    return found


def figures(source: str) -> list[str]:
    return [
        f"line {line}: {match.group(0)!r}"
        for line, text in prose(source)
        for match in FIGURE.finditer(text)
        if match.group(0) not in VERSIONS
    ]


def test_no_benchmark_figure_in_reader_or_app() -> None:
    found = []
    for path in sorted(p for package in ("reader", "app") for p in (ROOT / package).rglob("*.py")):
        found += [f"{path.relative_to(ROOT)} {where}" for where in figures(path.read_text())]
    assert found == []


def test_the_check_sees_a_figure_and_leaves_sizes_and_names_alone() -> None:
    source = (
        '"""Fast: 1.71 GB/s, 0.74x curl."""\n'
        "X = 1  # a hop cost 12 ms\n"
        "Y = 0x10  # 4 MiB x 4 parts; 16x16 tiles; FastAPI 0.16x\n"
    )
    assert figures(source) == ["line 2: '12 ms'", "line 1: 'GB/s'", "line 1: '0.74x'"]
