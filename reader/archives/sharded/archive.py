"""ShardedArchive: the shards a sharded checkpoint's index names, as one archive.

The rule for what is read when:
- opening reads the index, then opens every shard it names, concurrently (at most
  OPEN_CONCURRENCY at once): each shard's tail and its data.pkl, as opening any torch.save
  checkpoint does, and nothing of its tensors' bytes. The layouts live in the shards' pickles and
  `tensors()` / `layout()` are synchronous, so they are known once `open_archive` returns;
- every read, stream and load goes to the shard(s) holding the names asked for; `load` groups
  its selection by shard and loads those shards concurrently (READ_CONCURRENCY at once), each as
  one `Archive.load`: a selection inside one shard reads that shard's bytes and no other's.

Each shard is its own `Archive` with its own source, so its version is pinned when it opens
(ETag, generation, commit; a shard that changes raises SourceChanged as any archive does) and
`revalidate` asks each one. On the Hugging Face Hub each source pins the commit its revision
named at open; they must all be the index's (else SourceChanged: the revision moved meanwhile).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...entries.parsing import ParseBudget
from ...errors import (
    ArchiveFormatError,
    FileNotFound,
    LocationError,
    ModelNotFound,
    ReaderError,
    SourceChanged,
    SourceError,
)
from ...loading.budget import budget_bytes
from ...loading.selection import Selection
from ...loading.shards import Shard
from ...pt2.checkpoint import CHECKPOINT_MODEL
from ...pt2.graph import MAX_PROGRAM_BYTES
from ...pt2.tensorinfo import TensorInfo
from ...sources import ByteSource, SourceStats
from ...tasks import task_group
from ...versions import version_basis
from ..deprecated import keyword_only
from ..reads import TensorReads
from .index import INDEX_SUFFIX, MAX_INDEX_BYTES, ShardIndex, parse_shard_index, shard_location

if TYPE_CHECKING:
    from ...bodies.entry import EntryBytes
    from ...bodies.tensor import Order, TensorBytes
    from ...cache import Stale
    from ...pt2.executorch import EmbeddedFile
    from ...pt2.graph import Graph, TensorConsumers
    from ..archive import Archive

CONTAINER = "sharded-checkpoint"
OPEN_CONCURRENCY = 16  # shards opened at once (each open is two small reads)
# shards a load or read_many reads at once: each one's load already reads in parallel parts
# (HttpOptions.parallel_parts), so more would multiply connections and buffers, not speed
READ_CONCURRENCY = 4
SHARD_CONTAINERS = ("checkpoint",)  # what a shard may be: a torch.save checkpoint

OpenShard = Callable[[str], Awaitable["Archive"]]


class ShardSources:
    """The index's source and every shard's, as one: what `archive.source` offers the service
    (`location`, `identity`, `stats`, `revalidate`, `close`) for versions, metrics and ETags;
    `local` if every one is a local file."""

    def __init__(self, index: ByteSource, shards: dict[str, Archive]) -> None:
        self.index = index
        self.shards = shards
        self.location = index.location
        self.size = index.size + sum(shard.source.size for shard in shards.values())
        self.etag = None  # versions come from `identity`, which covers every shard
        self.identity = _combined_identity(index, shards)
        self.local = all(source.local for source in self._sources())

    def _sources(self) -> list[ByteSource]:
        return [self.index, *(shard.source for shard in self.shards.values())]

    @property
    def stats(self) -> SourceStats:
        total = SourceStats()
        for source in self._sources():
            for purpose, counted in source.stats.by_purpose.items():
                total.record(purpose, counted.bytes, requests=counted.requests)
        return total

    @property
    def revalidated(self) -> bool:
        """The origin has said every one of them is current (see SourceBacked.revalidated)."""
        return all(source.revalidated for source in self._sources())

    @property
    def stale(self) -> Stale | None:
        """The first of them opened stale (the index, else a shard in order), or None."""
        return next((s.stale for s in self._sources() if s.stale is not None), None)

    async def revalidate(self) -> bool:
        checks = [self.index.revalidate(), *(shard.revalidate() for shard in self.shards.values())]
        return all(await asyncio.gather(*checks))

    async def close(self) -> None:
        closing = [self.index.close(), *(shard.close() for shard in self.shards.values())]
        results = await asyncio.gather(*closing, return_exceptions=True)
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            raise failed


def _combined_identity(index: ByteSource, shards: dict[str, Archive]) -> str:
    """Names the bytes of the index and of every shard (as reader.versions names one source's),
    so every replica reading the same objects derives the same version."""
    parts = [f"index={version_basis(index)}", *(f"{n}={version_basis(a.source)}" for n, a in shards.items())]
    return "sharded-" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


class ShardedArchive(TensorReads):
    """A sharded checkpoint (`*.bin.index.json` and its shards) behind the API of `Archive`.

    One model, "checkpoint", whose tensors are the names of the index's `weight_map`, listed shard
    by shard (shards in file-name order, each in its own order: the state dict's). Layouts are the
    shards' own, but for `storage.entry`, which is prefixed with the shard's file name
    (`pytorch_model-00001-of-00002.bin!/pytorch_model-00001-of-00002/data/0`): names that share
    one entry share storage, and two shards never do. `shards` maps each shard file to its
    `Archive`; `shard_stats` gives each one's requests and bytes, `stats` their sum; `shard_of(name)`
    the shard holding a name; `total_size` the index's `metadata.total_size` as written.
    """

    container = CONTAINER

    def __init__(self, location: str, source: ShardSources, index: ShardIndex) -> None:
        self.source = source
        self.index = index
        self.shards = source.shards
        self.root = os.path.basename(_path_of(location))[: -len(INDEX_SUFFIX)]
        self.total_size = index.total_size  # metadata.total_size as written (writers count it differently)
        self.unreadable: dict[str, str] = {}  # a shard with an unreadable model is refused at open
        self._tensors = self._listing()

    def _listing(self) -> dict[str, TensorInfo]:
        """Every weight_map name's layout, checked to be in the shard the index says."""
        listed: dict[str, TensorInfo] = {}
        wanted: dict[str, set[str]] = {}
        for name, shard in self.index.weight_map.items():
            wanted.setdefault(shard, set()).add(name)
        for shard, archive in self.shards.items():
            held = {info.name: info for info in archive.tensors()}
            missing = sorted(wanted[shard] - held.keys())
            if missing:
                raise ArchiveFormatError(
                    f"{self.source.location}: weight_map puts {missing[0]!r} in shard {shard!r}, which "
                    f"does not hold it ({len(missing)} such name{'s' if len(missing) > 1 else ''})"
                )
            for name, info in held.items():
                if name in wanted[shard]:
                    entry = f"{shard}!/{info.storage.entry}"
                    listed[name] = dataclasses.replace(
                        info, storage=dataclasses.replace(info.storage, entry=entry)
                    )
        return listed

    # -- what it is ------------------------------------------------------------------------------

    @property
    def shard_stats(self) -> dict[str, dict[str, dict[str, int]]]:
        """Each shard's `stats`, by shard file name."""
        return {name: archive.stats for name, archive in self.shards.items()}

    @property
    def models(self) -> list[str]:
        return [CHECKPOINT_MODEL]

    def resolve_model(self, model: str | None) -> str:
        if model is None or model == CHECKPOINT_MODEL:
            return CHECKPOINT_MODEL
        raise ModelNotFound(f"no model {model!r} (models: {CHECKPOINT_MODEL})")

    def _named(self, model: str | None) -> tuple[str, Mapping[str, TensorInfo]]:
        return self.resolve_model(model), self._tensors

    @keyword_only("model")
    def tensors(self, *, model: str | None = None) -> list[TensorInfo]:
        self.resolve_model(model)
        return list(self._tensors.values())

    @keyword_only("model")
    def shard_of(self, name: str, *, model: str | None = None) -> Archive:
        """The open shard that holds `name` (TensorNotFound if the index does not name it)."""
        self.layout(name, model=model)
        return self.shards[self.index.weight_map[name]]

    # -- reading: each call goes to the shard(s) holding the names --------------------------------

    @keyword_only("model", "order")
    def tensor(self, name: str, *, model: str | None = None, order: Order = "default") -> TensorBytes:
        return self.shard_of(name, model=model).tensor(name, order=order)

    @keyword_only("model", "order")
    async def read_many(
        self, names: Iterable[str], *, model: str | None = None, order: Order = "default"
    ) -> dict[str, bytes]:
        """Each shard's names in one `Archive.read_many`, the shards concurrently."""
        return await self._load_with(
            Selection(model, names=tuple(names)),
            lambda shard, part: shard.read_many(part.names or (), order=order),
        )

    @keyword_only("model")
    async def load(
        self,
        *,
        model: str | None = None,
        prefix: str | None = None,
        names: Sequence[str] | None = None,
        order: Order = "default",
        copy: bool = False,
        verify: bool | None = None,
        shard: Shard | None = None,
    ) -> dict[str, np.ndarray]:
        """Only the shards holding the selection are read, concurrently, each as one `Archive.load`
        of its part (so tied names in a shard share memory as there)."""
        return await self._load_with(
            Selection(model, prefix, names, order, copy, verify, shard),
            lambda archive, part: archive.load(**part.keywords()),
        )

    async def _load_with(
        self, selection: Selection, load_part: Callable[[Archive, Selection], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        """The selection loaded shard by shard with `load_part(shard, its part of the selection)`,
        merged in the selection's order (reader.torch loads through this too)."""
        parts = self._parts(selection)
        found = await _by_shard(parts, load_part)
        return {name: found[name] for _, part in parts for name in part.names or ()}

    def _parts(self, selection: Selection) -> list[tuple[Archive, Selection]]:
        """Each shard holding some of the selection, with its part (exactly its names)."""
        by_shard: dict[str, list[str]] = {}
        for info in selection.tensors(self):
            by_shard.setdefault(self.index.weight_map[info.name], []).append(info.name)
        return [(self.shards[shard], selection.part(names)) for shard, names in by_shard.items()]

    @keyword_only("model")
    async def iter_load(
        self,
        *,
        model: str | None = None,
        prefix: str | None = None,
        names: Sequence[str] | None = None,
        order: Order = "default",
        copy: bool = False,
        verify: bool | None = None,
        shard: Shard | None = None,
        max_buffered: int | None = None,
    ) -> AsyncIterator[tuple[str, np.ndarray]]:
        """Each shard's part through its own `iter_load`, READ_CONCURRENCY shards at once, each
        within its share of `max_buffered` (a part hands over one array at a time, when the
        consumer takes it). Stopping early cancels what is still reading."""
        share = max(1, budget_bytes(max_buffered) // READ_CONCURRENCY)
        landed: asyncio.Queue[tuple[str, np.ndarray] | None] = asyncio.Queue(maxsize=1)

        async def part(archive: Archive, selection: Selection) -> dict[str, Any]:
            async for item in archive.iter_load(**selection.keywords(), max_buffered=share):
                await landed.put(item)
            return {}

        async def run() -> None:
            try:
                selection = Selection(model, prefix, names, order, copy, verify, shard)
                await _by_shard(self._parts(selection), part)
            finally:
                await landed.put(None)

        task = asyncio.ensure_future(run())
        try:
            while (item := await landed.get()) is not None:
                yield item
            await task  # raises what a shard raised
        finally:
            task.cancel()

    # -- what a checkpoint does not have --------------------------------------------------------

    @property
    def executorch_files(self) -> list[EmbeddedFile]:
        return []

    def executorch_file(self, name: str) -> EntryBytes:
        raise FileNotFound(f"no ExecuTorch file {name!r} in this archive (files: none)")

    @keyword_only("model")
    async def graph(self, *, model: str | None = None, max_bytes: int = MAX_PROGRAM_BYTES) -> Graph:
        model = self.resolve_model(model)
        raise ArchiveFormatError(f"model {model!r} of a sharded checkpoint has no exported program")

    @keyword_only("model")
    async def consumers(self, name: str, *, model: str | None = None) -> TensorConsumers:
        self.layout(name, model=model)
        return await self.graph(model=model)


async def _by_shard(
    parts: list[tuple[Archive, Selection]],
    call: Callable[[Archive, Selection], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    """`call(shard, its part)` for each part, READ_CONCURRENCY at once; their results merged."""
    limit = asyncio.Semaphore(READ_CONCURRENCY)

    async def one(shard: Archive, part: Selection) -> dict[str, Any]:
        async with limit:
            return await call(shard, part)

    async with task_group() as group:  # a failure cancels the other shards' reads
        tasks = [group.create_task(one(shard, part)) for shard, part in parts]
    return {name: value for task in tasks for name, value in task.result().items()}


async def open_sharded(
    location: str, source: ByteSource, open_shard: OpenShard, budget: ParseBudget
) -> ShardedArchive:
    """The sharded checkpoint whose index `source` holds (it is closed if opening fails), the index
    parsed as a step of `budget`; each shard is opened by `open_shard(its location)`, which carries
    the options the index was opened with (credentials, HTTP options, ...)."""
    opened: dict[str, Archive] = {}
    try:
        if source.size > MAX_INDEX_BYTES:
            raise ArchiveFormatError(
                f"{source.location}: {source.size} bytes is over the {MAX_INDEX_BYTES}-byte cap for an index"
            )
        data = await source.read(0, source.size, purpose="open")
        index = await budget.run(lambda _deadline: parse_shard_index(data, source.location))
        limit = asyncio.Semaphore(OPEN_CONCURRENCY)

        async def open_one(shard: str) -> None:
            async with limit:
                opened[shard] = await _open_shard(open_shard, shard, shard_location(location, shard), source)

        async with task_group() as group:  # a failure cancels the other opens, then they are closed
            for shard in index.shards:
                group.create_task(open_one(shard))
        _check_one_commit(source, opened)
        return ShardedArchive(location, ShardSources(source, {s: opened[s] for s in index.shards}), index)
    except BaseException:
        await asyncio.gather(source.close(), *(a.close() for a in opened.values()), return_exceptions=True)
        raise


async def _open_shard(open_shard: OpenShard, shard: str, location: str, index: ByteSource) -> Archive:
    """One shard, or an error that names it: FileNotFound if it is missing."""
    where = f"shard {shard!r} of {index.location}"
    try:
        archive = await open_shard(location)
    except (SourceChanged, LocationError):
        raise
    except SourceError as exc:
        if _is_missing(location, exc):
            raise FileNotFound(f"{where} is missing: {exc}") from None
        raise SourceError(f"{where}: {exc}") from None
    except ArchiveFormatError as exc:
        raise ArchiveFormatError(f"{where}: {exc}") from None
    if archive.container not in SHARD_CONTAINERS:
        await archive.close()
        raise ArchiveFormatError(f"{where} is a {archive.container!r} archive, not a torch.save checkpoint")
    return archive


def _check_one_commit(index: ByteSource, shards: dict[str, Archive]) -> None:
    """On the Hugging Face Hub every source pins the commit its revision named when it opened: all
    must be one commit, or the revision moved while the shards were opening (open again)."""
    commit = (index.pinned() or {}).get("commit")
    for shard, archive in shards.items():
        other = (archive.source.pinned() or {}).get("commit")
        if commit and other and other != commit:
            raise SourceChanged(
                f"{index.location} was read at commit {commit}, shard {shard!r} at {other}: the "
                "revision moved while opening; open it again"
            )


def _is_missing(location: str, error: ReaderError) -> bool:
    """A local shard that does not exist, or a remote one its server answered 404 for at open."""
    if "://" not in location:
        return not os.path.lexists(location)
    return "HTTP 404" in str(error)


def _path_of(location: str) -> str:
    return location.split("#", 1)[0].split("?", 1)[0] if "://" in location else location
