"""The library's public surface is small, typed and spelled out: `help()` and `inspect.signature`
show every parameter of reader's public functions and methods (no `**kwargs`, no `*args`); both kinds
of archive `open_archive` gives are a `reader.ArchiveLike` and offer exactly its members (and those
kept one release with a DeprecationWarning); every read takes one parameter order: what it reads,
then where the bytes go, then the rest by keyword (`model=`, `order=`, `index=`)."""

from __future__ import annotations

import ast
import inspect
import pathlib
import typing
import warnings
from collections.abc import Callable, Iterator
from dataclasses import fields

import numpy as np
import pytest

import reader
import reader.torch
from reader.archives.archive_like import ArchiveLike
from reader.loading.selection import Selection

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARCHIVES = ROOT / "tests" / "fixtures" / "archives"
LOADS_IN_ORDER = [field.name for field in fields(Selection)]

# what a user needs of any opened archive (async with aside): ArchiveLike's members
ARCHIVE_LIKE = {
    "container", "source", "stats", "models", "unreadable", "resolve_model", "tensors", "layout",
    "tensor", "read", "read_many", "read_numpy", "load", "iter_load", "executorch_files",
    "executorch_file", "graph", "consumers", "revalidate", "close",
}  # fmt: skip
# what each kind adds of its own
OWN = {
    reader.Archive: {"root", "revalidated", "stale"},
    reader.ShardedArchive: {
        "root",
        "revalidated",
        "stale",
        "index",
        "shards",
        "shard_stats",
        "shard_of",
        "total_size",
    },
}
# kept for one release, each with a DeprecationWarning (tested below)
DEPRECATED = {"location", "identity", "read_into", "stream"}
# every read and where its keywords start: what it reads comes first, then where the bytes go
SUBJECTS = {
    "tensors": (),
    "layout": ("name",),
    "tensor": ("name",),
    "read": ("name",),
    "read_many": ("names",),
    "read_numpy": ("name",),
    "load": (),
    "iter_load": (),
    "graph": (),
    "consumers": ("name",),
}
ONE_ORDER = ["model", "order", "index"]  # the keywords every read takes that it takes at all, in this order


def _ours(thing: object) -> bool:
    return (getattr(thing, "__module__", None) or "").split(".")[0] == "reader"


def _public_callables() -> Iterator[tuple[str, Callable[..., object]]]:
    """Every public function of reader and reader.torch, and every public method (and constructor)
    of the classes reader exports, that reader's own code defines (inherited ones included)."""
    for module, names in ((reader, reader.__all__), (reader.torch, dir(reader.torch))):
        for name in names:
            if name.startswith("_"):
                continue
            thing = getattr(module, name)
            if inspect.isfunction(thing) and _ours(thing):
                yield f"{module.__name__}.{name}", thing
            elif inspect.isclass(thing) and _ours(thing) and module is reader:
                for member in dir(thing):
                    if member.startswith("_") and member != "__init__":
                        continue
                    value = inspect.getattr_static(thing, member)
                    value = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
                    if inspect.isfunction(value) and _ours(value):
                        yield f"reader.{name}.{member}", value


def _public_members(kind: type) -> set[str]:
    return {name for name in dir(kind) if not name.startswith("_")}


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
        "reader.ShardedArchive.read_many",
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


def test_archive_like_is_what_a_user_needs() -> None:
    protocol = {name for name in vars(ArchiveLike) | ArchiveLike.__annotations__ if not name.startswith("_")}
    assert protocol == ARCHIVE_LIKE
    assert len(protocol) <= 20


@pytest.mark.parametrize("kind", [reader.Archive, reader.ShardedArchive])
def test_each_archive_class_is_small(kind: type) -> None:
    """At most 20 methods and 250 lines of its own (reader.archives.reads holds what both share)."""
    source = inspect.getsource(kind)
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.ClassDef)
    methods = [item for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert len(methods) <= 20 and len(source.splitlines()) <= 250


@pytest.mark.parametrize("kind", [ArchiveLike, reader.Archive, reader.ShardedArchive])
@pytest.mark.parametrize("method", sorted(SUBJECTS))
def test_every_read_takes_one_parameter_order(kind: type, method: str) -> None:
    parameters = list(inspect.signature(getattr(kind, method)).parameters.values())[1:]  # after self
    positional = [p.name for p in parameters if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    keywords = [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert tuple(positional) == SUBJECTS[method]
    assert keywords[0] == "model"
    assert [name for name in keywords if name in ONE_ORDER] == [n for n in ONE_ORDER if n in keywords]
    named = {p.name: p.default for p in parameters}
    assert named["model"] is None and named.get("order", "default") == "default"
    assert named.get("index") is None


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
    keyword-only, `model` first, with its defaults."""
    parameters = inspect.signature(load).parameters
    keywords = [name for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert [name for name in keywords if name in LOADS_IN_ORDER] == LOADS_IN_ORDER
    for field in fields(Selection):
        assert parameters[field.name].default == field.default, (load, field.name)


def _deprecated(match: str) -> pytest.WarningsRecorder:
    return pytest.warns(DeprecationWarning, match=match)


async def test_the_old_positional_order_still_works_with_a_warning() -> None:
    """Calls written for the old order (`model`, `order` by position) give what the keywords give,
    each with a DeprecationWarning that names the keywords to write."""
    async with reader.open_archive(ARCHIVES / "two_models.pt2") as ar:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the new order warns of nothing
            want = await ar.read("proj.weight", model="encoder", order="contiguous")
            layout = ar.layout("proj.bias", model="encoder")
            listing = ar.tensors(model="encoder")
        with _deprecated(r"read\(\): pass model=, order= by keyword"):
            assert await ar.read("proj.weight", "encoder", "contiguous") == want
        with _deprecated(r"layout\(\): pass model= by keyword"):
            assert ar.layout("proj.bias", "encoder") == layout
        with _deprecated("tensors"):
            assert ar.tensors("encoder") == listing
        with _deprecated("tensor"):
            assert ar.tensor("proj.weight", "encoder", "contiguous").length == len(want)
        with _deprecated("read_many"):
            assert await ar.read_many(["proj.weight"], "encoder", "contiguous") == {"proj.weight": want}
        with _deprecated("read_numpy"):
            assert (await ar.read_numpy("proj.weight", "encoder")).tobytes() == want
        with _deprecated(r"load\(\): pass model="):
            assert (await ar.load("encoder"))["proj.weight"].tobytes() == want
        with _deprecated("iter_load"):
            assert {name async for name, _ in ar.iter_load("encoder")} == {t.name for t in listing}
        with _deprecated("consumers"):
            assert await ar.consumers("proj.weight", "encoder") == await ar.consumers(
                "proj.weight", model="encoder"
            )
        with _deprecated(r"graph\(\): pass model="):
            assert await ar.graph("encoder") is await ar.graph(model="encoder")
        with _deprecated("load_archive"):
            pytest.importorskip("torch")
            tensors = await reader.torch.load_archive(ar, "encoder")
        assert tensors["proj.weight"].numpy().tobytes() == want
        with pytest.raises(TypeError, match="multiple values for 'model'"), _deprecated("read"):
            await ar.read("proj.weight", "encoder", model="encoder")
        with pytest.raises(TypeError, match="positional arguments"):
            await ar.read("proj.weight", "encoder", "contiguous", None)  # type: ignore[misc]


async def test_the_members_that_go_still_work_with_a_warning() -> None:
    async with reader.open_archive(ARCHIVES / "two_models.pt2") as ar:
        want = await ar.read("proj.weight", model="encoder")
        with _deprecated(r"archive.tensor\(name\).read_into\(buffer\)"):
            buffer = np.empty(len(want), dtype=np.uint8)
            await ar.read_into("proj.weight", buffer, "encoder")
        assert buffer.tobytes() == want
        with _deprecated("read_into"), pytest.raises(ValueError, match="the buffer holds"):
            await ar.read_into("proj.weight", bytearray(len(want) - 1), model="encoder")
        with _deprecated(r"archive.tensor\(name\).chunks"):
            chunks = ar.stream("proj.weight", "encoder", "default", 8, 40, 16)
        assert b"".join([bytes(c) async for c in chunks]) == want[8:40]
        with _deprecated("archive.source.location"):
            assert ar.location == ar.source.location
        with _deprecated("archive.source.identity"):
            assert ar.identity == ar.source.identity


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
            # exactly the surface: no plumbing public (what a load reads through, a sharded load's parts)
            members = {name for name in dir(ar) if not name.startswith("_")}
            assert members == ARCHIVE_LIKE | OWN[kind] | DEPRECATED
            name = ar.tensors()[0].name
            with _deprecated("read"):
                assert await ar.read(name, None, "contiguous") == await ar.read(name, order="contiguous")
    assert not isinstance(object(), reader.ArchiveLike)
