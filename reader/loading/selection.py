"""What a load takes: one typed `Selection`, and the two things it reads through.

The public loads (`Archive.load`, `Archive.iter_load`, `ShardedArchive`'s, `reader.load`,
`reader.torch.load`, `reader.torch.iter_load`) spell out `model` and the keyword-only parameters
named as `Selection`'s fields, in its order (tests/test_public_surface.py holds them to it); inside
they carry one `Selection`. `select_tensors` is the one rule every selection by model, prefix and
names follows, here and in bundles, manifests, listings and comparisons (an unknown name is
`TensorNotFound`, never dropped). The loader never imports the archive: it selects from a `Catalog` (what
`Archive` answers) and reads through the `Payloads` the archive hands it. `checkpoint` is what the
loaders users already run are handed (safe_open, DCP, vLLM): a model's state dict, not the exported
program's constants.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Protocol

from ..bodies.tensor import ORDERS, Order
from ..entries.fetcher import EntryFetcher
from ..errors import TensorNotFound
from ..pt2.tensorinfo import TensorInfo
from ..sources import ByteSource
from ..zipfmt import ZipEntry
from .shards import Shard


@dataclass(frozen=True, slots=True)
class Selection:
    """Which tensors a load returns and how, checked once: `model`; `prefix`: only tensors whose
    names start with it; `names`: exactly these (in this order; kept as a tuple); `order`:
    "default" (memory order, views keep their strides) or "contiguous" (row-major); `copy`: owned
    arrays instead of read-only views of a mapped local file; `verify`: check every CRC-32, mapped
    views included (None: whatever is read); `shard`: a rank's blocks of the tensors its patterns
    name (see `Shard`). The public loads take these in this order."""

    model: str | None = None
    prefix: str | None = None
    names: Sequence[str] | None = None
    order: Order = "default"
    copy: bool = False
    verify: bool | None = None
    shard: Shard | None = None

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, not {self.order!r}")
        if self.names is not None:
            if isinstance(self.names, str):
                raise TypeError("names is a sequence of tensor names, not one string")
            object.__setattr__(self, "names", tuple(dict.fromkeys(self.names)))
        if self.shard is not None and not isinstance(self.shard, Shard):
            raise TypeError(f"shard must be a reader.Shard, not {type(self.shard).__name__}")

    def keywords(self) -> dict[str, Any]:
        """The selection as the public loads take it (`ar.load(**selection.keywords())`)."""
        return {field.name: getattr(self, field.name) for field in fields(self)}

    def part(self, names: Sequence[str]) -> Selection:
        """The same selection narrowed to exactly `names` (a sharded checkpoint's part in one shard)."""
        return replace(self, model=None, prefix=None, names=tuple(names))

    def tensors(self, catalog: Catalog) -> list[TensorInfo]:
        """Named tensors as given (each must exist), else every readable tensor of one model (the
        named one, else the default) whose name starts with `prefix`: weights and constants, as
        torch's state dict plus its constants holds them."""
        chosen = select_tensors(catalog, self.model, self.prefix, self.names)
        return chosen if self.names is not None else [t for t in chosen if t.readable]


def select_tensors(
    catalog: Catalog,
    model: str | None = None,
    prefix: str | None = None,
    names: Sequence[str] | None = None,
    *,
    every_model: bool = False,
) -> list[TensorInfo]:
    """The one rule every selection by model, prefix and names follows (loads, bundles, manifests,
    listings, comparisons). The scope is one model (the named one, else the default), or every
    model when `every_model` and none is named. `names` given (even empty): exactly those, each
    once, in their order (in every model of the scope that has them); a name the scope lacks
    raises `TensorNotFound`, never drops silently. Else the scope's tensors whose names start with
    `prefix`."""
    if isinstance(names, str):
        raise TypeError("names is a sequence of tensor names, not one string")
    if every_model and model is None:
        tensors = catalog.tensors(model=None)
        return starting_with(tensors, prefix) if names is None else _named(tensors, names)
    if names is not None:
        return [catalog.layout(name, model=model) for name in dict.fromkeys(names)]
    return starting_with(catalog.tensors(model=catalog.resolve_model(model)), prefix)


def _named(tensors: Iterable[TensorInfo], names: Sequence[str]) -> list[TensorInfo]:
    """`names` among tensors of several models: each must be in one at least."""
    by_name: dict[str, list[TensorInfo]] = {name: [] for name in names}
    for info in tensors:
        if info.name in by_name:
            by_name[info.name].append(info)
    missing = [name for name, found in by_name.items() if not found]
    if missing:
        raise TensorNotFound(f"no tensor {', '.join(map(repr, missing))} in any model")
    return [info for found in by_name.values() for info in found]


def starting_with(tensors: Iterable[TensorInfo], prefix: str | None) -> list[TensorInfo]:
    """Those of `tensors` whose names start with `prefix` (all of them for None or "")."""
    return [t for t in tensors if t.name.startswith(prefix)] if prefix else list(tensors)


PROGRAM_CONSTANT = "constant"  # TensorInfo.kind of what an exported program's constants config lists


def checkpoint(catalog: Catalog, model: str | None = None) -> list[TensorInfo]:
    """The checkpoint of one model (the named one, else the default), readable or not: what a loader
    fills a model with (`safe_open`'s `keys()`, DCP's metadata, vLLM's weights). For an exported
    program that is its state dict, the parameters and persistent buffers under their `state_dict`
    names; a `torch.save` checkpoint or an AOTInductor package is all checkpoint.

    Left out: the program's constants (`kind == "constant"`: non-persistent buffers and lifted tensor
    constants), which its graph reads but no `model.state_dict()` holds. The config a tensor is listed
    in is enough to tell: torch's writer lists exactly `ExportedProgram.state_dict` in the weights
    config and its `constants` in the constants config, and `torch.export.load` reads them back so.
    The program's signature says the same (tests/test_checkpoint_names.py holds the two to it) but
    lies in `models/<model>.json`, which can be large and is never read for this. (A program's custom
    objects are listed as `custom_object`, as a checkpoint's plain values are: never readable, so
    they stay only among what a caller reports as skipped.)"""
    return [t for t in catalog.tensors(model=catalog.resolve_model(model)) if t.kind != PROGRAM_CONSTANT]


class Catalog(Protocol):
    """What a selection is made from (an `Archive`)."""

    def tensors(self, *, model: str | None = None) -> list[TensorInfo]: ...

    def layout(self, name: str, *, model: str | None = None) -> TensorInfo: ...

    def resolve_model(self, model: str | None) -> str: ...


@dataclass(frozen=True, slots=True)
class Payloads:
    """What a load reads through: the archive's source, its entries by name and its fetcher (which
    knows the data offsets found so far)."""

    source: ByteSource
    entries: Mapping[str, ZipEntry]
    fetcher: EntryFetcher


class Loadable(Catalog, Protocol):
    """An open archive as the loader sees it."""

    def _payloads(self) -> Payloads: ...
