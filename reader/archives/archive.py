"""Archive: one opened archive; its tensors by name, read in either order, loaded many at once.

What each member promises is on reader.ArchiveLike; the reads by name are reader.archives.reads'.
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, Sequence

import numpy as np

from ..bodies.entry import EntryBytes
from ..bodies.tensor import Order, TensorBytes, read_all
from ..entries.fetcher import EntryFetcher
from ..entries.opening import OpenedIndex
from ..errors import (
    ArchiveFormatError,
    FileNotFound,
    ModelNotFound,
    SourceError,
    UnsupportedPayload,
)
from ..loading.budget import budget_bytes
from ..loading.load import iter_arrays, load_arrays
from ..loading.selection import Payloads, Selection
from ..loading.shards import Shard
from ..pt2.executorch import EmbeddedFile, executorch_files
from ..pt2.graph import MAX_PROGRAM_BYTES, Graph, TensorConsumers, consumers_of, parse_graph
from ..pt2.tensorinfo import TensorInfo
from ..sources import ByteSource
from .deprecated import keyword_only
from .reads import TensorReads

DEFAULT_MODEL = "model"


class Archive(TensorReads):
    """An opened archive. Get one from `open_archive`.

    `container` says which PyTorch ZIP it is: "pt2" (torch.export), "checkpoint" (torch.save;
    one model, "checkpoint"), "aoti" (an AOTInductor package; models "aoti/<name>") or
    "pt2+aoti" (both). `unreadable` maps models that are present but whose weights exist only
    in compiled code (AOTInductor .so or blob) to why they cannot be read.
    """

    def __init__(self, source: ByteSource, opened: OpenedIndex, fetcher: EntryFetcher) -> None:
        self.source = source
        self.root = opened.root
        self._entries = opened.entries
        self._index = opened.index
        self._fetcher = fetcher
        self._executorch = executorch_files(self._entries, self.root)
        self.container = opened.container
        self.unreadable = opened.unreadable
        self._graphs: dict[str, asyncio.Task[Graph]] = {}
        self._metadata = opened.budget  # what the graphs may inflate to, after the configs

    @property
    def models(self) -> list[str]:
        return list(self._index)

    def _named(self, model: str | None) -> tuple[str, Mapping[str, TensorInfo]]:
        resolved = self.resolve_model(model)
        return resolved, self._index[resolved]

    @keyword_only("model")
    def tensors(self, *, model: str | None = None) -> list[TensorInfo]:
        models = self.models if model is None else [self.resolve_model(model)]
        return [info for name in models for info in self._index[name].values()]

    @keyword_only("model", "order")
    def tensor(self, name: str, *, model: str | None = None, order: Order = "default") -> TensorBytes:
        info = self.layout(name, model=model)
        return TensorBytes(info, self._entries[info.storage.entry], self._fetcher, order)

    @keyword_only("model", "order")
    async def read_many(
        self, names: Iterable[str], *, model: str | None = None, order: Order = "default"
    ) -> dict[str, bytes]:
        tensors = {name: self.tensor(name, model=model, order=order) for name in names}
        return dict(zip(tensors, await read_all(list(tensors.values()), self._fetcher)))

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
        selection = Selection(model, prefix, names, order, copy, verify, shard)
        return await load_arrays(self, selection)

    @keyword_only("model")
    def iter_load(
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
        selection = Selection(model, prefix, names, order, copy, verify, shard)
        return iter_arrays(self, selection, budget_bytes(max_buffered))

    def _payloads(self) -> Payloads:
        """What a load reads through (reader.loading): the source, the entries and the fetcher."""
        return Payloads(self.source, self._entries, self._fetcher)

    @property
    def executorch_files(self) -> list[EmbeddedFile]:
        return list(self._executorch.values())

    def executorch_file(self, name: str) -> EntryBytes:
        found = self._executorch.get(name)
        if found is None:
            have = ", ".join(self._executorch) or "none"
            raise FileNotFound(f"no ExecuTorch file {name!r} in this archive (files: {have})")
        return EntryBytes(self._entries[found.entry], self._fetcher)

    @keyword_only("model")
    async def graph(self, *, model: str | None = None, max_bytes: int = MAX_PROGRAM_BYTES) -> Graph:
        model = self.resolve_model(model)
        name = f"{self.root}/models/{model}.json"
        entry = self._entries.get(name)
        if entry is None:
            raise ArchiveFormatError(f"model {model!r} has no program entry {name!r}")
        if entry.size > max_bytes:
            raise ArchiveFormatError(f"{name}: {entry.size} bytes is over the {max_bytes}-byte program cap")
        task = self._graphs.get(model)
        failed_read = (
            task is not None
            and task.done()
            and (task.cancelled() or isinstance(task.exception(), SourceError))
        )
        if task is None or failed_read:
            self._metadata.take(entry)
            read = self._fetcher.read(entry)
            task = asyncio.ensure_future(_parsed(read, model, entry.name))
            self._graphs[model] = task
        return await asyncio.shield(task)

    @keyword_only("model")
    async def consumers(self, name: str, *, model: str | None = None) -> TensorConsumers:
        info = self.layout(name, model=model)
        return consumers_of(await self.graph(model=info.model), info, self.tensors(model=info.model))

    def resolve_model(self, model: str | None) -> str:
        if model is None:
            if len(self._index) == 1:
                return next(iter(self._index))
            if DEFAULT_MODEL in self._index:
                return DEFAULT_MODEL
            raise ModelNotFound(f"archive has models {self.models or '(none)'}; name one with model=...")
        if model not in self._index:
            if model in self.unreadable:
                raise UnsupportedPayload(self.unreadable[model])
            close = difflib.get_close_matches(model, self.models, n=5, cutoff=0.5)
            hint = f"; close matches: {', '.join(close)}" if close else ""
            raise ModelNotFound(f"no model {model!r} (models: {', '.join(self.models) or 'none'}){hint}")
        return model


async def _parsed(read: Awaitable[bytes], model: str, name: str) -> Graph:
    """The graph of the program entry `read` gives, parsed on a worker thread."""
    return await asyncio.to_thread(parse_graph, await read, model, name)
