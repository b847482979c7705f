"""The library's public surface is typed and spelled out: `help()` and `inspect.signature` show every
parameter of reader's public functions and methods (no `**kwargs`, no `*args`), and both kinds of
archive `open_archive` gives are a `reader.ArchiveLike`."""

from __future__ import annotations

import inspect
import pathlib
import typing
from collections.abc import Callable, Iterator
from dataclasses import fields

import pytest

import reader
import reader.torch
from reader.loading.selection import Selection

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARCHIVES = ROOT / "tests" / "fixtures" / "archives"
LOADS_IN_ORDER = [field.name for field in fields(Selection)][1:]  # after `model`


def _ours(thing: object) -> bool:
    return (getattr(thing, "__module__", None) or "").split(".")[0] == "reader"


def _public_callables() -> Iterator[tuple[str, Callable[..., object]]]:
    """Every public function of reader and reader.torch, and every public method (and constructor)
    of the classes reader exports, that reader's own code defines."""
    for module, names in ((reader, reader.__all__), (reader.torch, dir(reader.torch))):
        for name in names:
            if name.startswith("_"):
                continue
            thing = getattr(module, name)
            if inspect.isfunction(thing) and _ours(thing):
                yield f"{module.__name__}.{name}", thing
            elif inspect.isclass(thing) and _ours(thing) and module is reader:
                for member, value in vars(thing).items():
                    if member.startswith("_") and member != "__init__":
                        continue
                    value = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
                    if inspect.isfunction(value) and _ours(value):
                        yield f"reader.{name}.{member}", value


def test_the_walk_sees_the_public_surface() -> None:
    seen = dict(_public_callables())
    for name in (
        "reader.load",
        "reader.torch.load",
        "reader.torch.read",
        "reader.torch.iter_load",
        "reader.Archive.load",
        "reader.Archive.read_numpy",
        "reader.ShardedArchive.read",
        "reader.ShardedArchive.stream",
        "reader.open_archive.__init__",
        "reader.compare",
    ):
        assert name in seen, name


def test_no_public_signature_hides_its_parameters() -> None:
    hidden = [
        f"{name}: {parameter}"
        for name, function in _public_callables()
        for parameter in inspect.signature(function).parameters.values()
        if parameter.kind in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    ]
    assert not hidden, "spell these out as keyword-only parameters: " + ", ".join(hidden)


@pytest.mark.parametrize(
    "load",
    [
        reader.load,
        reader.torch.load,
        reader.Archive.load,
        reader.Archive.iter_load,
        reader.ShardedArchive.load,
        reader.ShardedArchive.iter_load,
        reader.torch.load_archive,
        reader.torch.iter_load,
    ],
)
def test_every_load_takes_the_selection_keywords_in_one_order(load: Callable[..., object]) -> None:
    """The loads build a `Selection` from their keywords in its field order: each lists them so,
    keyword-only, with its defaults."""
    parameters = inspect.signature(load).parameters
    keywords = [name for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert [name for name in keywords if name in LOADS_IN_ORDER] == LOADS_IN_ORDER
    assert "model" in parameters
    for field in fields(Selection):
        assert parameters[field.name].default == field.default, (load, field.name)


def test_order_and_index_are_typed() -> None:
    assert typing.get_args(reader.Order) == ("default", "contiguous")
    hints = typing.get_type_hints(reader.Archive.read, vars(reader) | vars(typing))
    assert hints["order"] == reader.Order
    assert hints["index"] == reader.Index | None


def test_py_typed_ships() -> None:
    assert (ROOT / "reader" / "py.typed").is_file()
    assert 'reader = ["py.typed"]' in (ROOT / "pyproject.toml").read_text()


async def test_both_kinds_of_archive_are_archive_like(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("torch")
    from testing.fixtures.make_sharded import write_sharded

    index = write_sharded(tmp_path / "gpt")
    for location, kind in ((ARCHIVES / "layouts.pt2", reader.Archive), (index, reader.ShardedArchive)):
        async with reader.open_archive(location) as ar:
            assert isinstance(ar, kind)
            assert isinstance(ar, reader.ArchiveLike)
            assert isinstance(ar.source.local, bool) and ar.source.local
    assert not isinstance(object(), reader.ArchiveLike)
