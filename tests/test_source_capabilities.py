"""Callers ask a source what it can do; they never test its type.

`ByteSource` carries the capabilities (local, mappable, reports_landed, cached, fast_connection,
part_size, serves_multiple_ranges, read_ranges_into, ...) with the answers of a source that has none
of them; each source overrides what it has. Outside reader/sources/ no code calls `is_http` or
tests `isinstance(..., SomethingSource)`.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from reader.cache.source import needs_full_check
from reader.errors import SourceError
from reader.sources import BytesSource, LocalFileSource

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARCHIVES = ROOT / "tests" / "fixtures" / "archives"


def _named(node: ast.expr) -> list[str]:
    """The class names an isinstance's second argument names (a tuple, a union, a dotted name)."""
    if isinstance(node, ast.Tuple):
        return [name for element in node.elts for name in _named(element)]
    if isinstance(node, ast.BinOp):
        return _named(node.left) + _named(node.right)
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.Name):
        return [node.id]
    return []


def type_tests_on_sources(tree: ast.AST) -> list[int]:
    """Lines that call `is_http` or test whether something is an instance of a `...Source` class."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = _named(node.func)
        sources = called == ["isinstance"] and len(node.args) == 2 and _named(node.args[1])
        if called == ["is_http"] or any(name.endswith("Source") for name in sources or ()):
            found.append(node.lineno)
    return found


def test_no_type_test_on_a_source_outside_the_sources() -> None:
    offending = []
    for package in ("reader", "app"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.is_relative_to(ROOT / "reader" / "sources"):
                continue
            for line in type_tests_on_sources(ast.parse(path.read_text(), str(path))):
                offending.append(f"{path.relative_to(ROOT)}:{line}")
    assert not offending, "ask the source's capabilities instead: " + ", ".join(offending)


def test_the_check_finds_type_tests() -> None:
    code = """
isinstance(source, LocalFileSource)
isinstance(s, (sources.CachedSource, int))
isinstance(s, int | HttpSource)
is_http(source)
sources.is_http(source)
isinstance(exc, reader.SourceChanged)
isinstance(source, TensorBytes)
"""
    assert type_tests_on_sources(ast.parse(code)) == [2, 3, 4, 5, 6]


async def test_a_source_without_capabilities_answers_the_defaults() -> None:
    source = BytesSource(bytes(range(256)) * 4)
    assert (source.local, source.mappable, source.reports_landed, source.cached) == (False,) * 4
    assert source.fast_connection is None and source.part_size > 0
    assert not await source.serves_multiple_ranges()
    assert source.pinned() is None and await source.current() is source
    assert not needs_full_check(source, "any", 0)  # a mapped entry checked where the caller asks
    await source.fill([(0, 10)])  # nothing to fetch
    with pytest.raises(SourceError, match="cannot be memory-mapped"):
        source.map()


async def test_the_default_read_ranges_into_reads_each_range_into_its_place() -> None:
    data = bytes(range(256)) * 4
    source = BytesSource(data)
    ranges = [(0, 3), (5, 9), (200, 210), (900, 1000)]
    first, second = bytearray(7), bytearray(110)  # two ranges each, end to end
    await source.read_ranges_into(ranges, [memoryview(first), memoryview(second)], fallback_gap=16)
    assert bytes(first) == data[0:3] + data[5:9]
    assert bytes(second) == data[200:210] + data[900:1000]
    assert source.stats.requests == 3  # the first two joined across their 2-byte gap
    with pytest.raises(ValueError, match="sorted and disjoint"):
        await source.read_ranges_into([(5, 9), (0, 3)], [memoryview(bytearray(7))])


async def test_a_local_file_is_local_and_mappable() -> None:
    source = await LocalFileSource.open(ARCHIVES / "layouts.pt2")
    try:
        assert source.local and source.mappable and not source.cached and not source.reports_landed
        assert source.map()[:2] == b"PK"
    finally:
        await source.close()


def test_a_remote_source_reports_what_lands() -> None:
    from reader.sources.http import HttpSource

    assert HttpSource.reports_landed and not HttpSource.local and not HttpSource.mappable


class _OwnSource(BytesSource):
    """A source of one's own whose `stream` predates `checked` (it takes only what it did)."""

    async def stream(self, start: int, end: int, *, chunk_size: int = 1 << 20, purpose: str = "data"):
        async for chunk in super().stream(start, end, chunk_size=chunk_size, purpose=purpose):
            yield chunk


async def test_a_source_whose_stream_predates_checked_still_streams_whole_entries() -> None:
    """Only a source that `reports_crcs` is given `checked`: an older `stream` keeps working, and a
    whole entry streamed from it is still CRC-checked."""
    import reader

    data = (ARCHIVES / "layouts.pt2").read_bytes()
    assert not _OwnSource.reports_crcs
    async with reader.open_archive(_OwnSource(data)) as own, reader.open_archive(BytesSource(data)) as ours:
        for info in ours.tensors():
            if info.readable:
                got = b"".join(
                    [bytes(chunk) async for chunk in own.tensor(info.name, model=info.model).chunks()]
                )
                assert got == b"".join(
                    [bytes(chunk) async for chunk in ours.tensor(info.name, model=info.model).chunks()]
                )
