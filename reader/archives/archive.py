"""Archive: look tensors up by name and read their bytes in either order."""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import AsyncIterator, Iterable, Sequence

import numpy as np

from ..bodies.entry import EntryBytes
from ..bodies.tensor import Order, TensorBytes, WritableBuffer, read_all
from ..bodies.tensor_slice import SliceBytes
from ..entries.fetcher import EntryFetcher
from ..entries.opening import OpenedIndex
from ..errors import (
    ArchiveFormatError,
    FileNotFound,
    ModelNotFound,
    SourceError,
    TensorNotFound,
    UnsupportedPayload,
)
from ..loading.budget import budget_bytes
from ..loading.load import iter_arrays, load_arrays
from ..loading.selection import Payloads, Selection
from ..loading.shards import Shard
from ..pt2.dtypes import dtype_of, to_numpy
from ..pt2.executorch import EmbeddedFile, executorch_files
from ..pt2.graph import MAX_PROGRAM_BYTES, Graph, TensorConsumers, consumers_of, parse_graph
from ..pt2.slicing import Index
from ..pt2.tensorinfo import TensorInfo
from ..sources import ByteSource
from ..zipfmt import ZipEntry
from .source_backed import SourceBacked

DEFAULT_MODEL = "model"


class Archive(SourceBacked):
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
    def location(self) -> str:
        return self.source.location

    @property
    def identity(self) -> str:
        """Changes whenever the archive's bytes may have changed (for ETags)."""
        return self.source.identity

    @property
    def stats(self) -> dict[str, dict[str, int]]:
        """Requests made and bytes read so far, by purpose ("open", "data")."""
        return self.source.stats.to_dict()

    @property
    def models(self) -> list[str]:
        return list(self._index)

    def tensors(self, model: str | None = None) -> list[TensorInfo]:
        """Every tensor of one model, or of every model when model is None."""
        models = self.models if model is None else [self.resolve_model(model)]
        return [info for name in models for info in self._index[name].values()]

    def layout(self, name: str, model: str | None = None) -> TensorInfo:
        tensors = self._index[self.resolve_model(model)]
        info = tensors.get(name)
        if info is None:
            close = difflib.get_close_matches(name, list(tensors), n=5, cutoff=0.6)
            hint = f"; close matches: {', '.join(close)}" if close else ""
            raise TensorNotFound(f"no tensor {name!r} in model {self.resolve_model(model)!r}{hint}")
        return info

    def tensor(self, name: str, model: str | None = None, order: Order = "default") -> TensorBytes:
        """One tensor in one order ("default": memory order, "contiguous": row-major), checked
        readable once: its `length`, `read()` and `chunks(start, end)`."""
        info = self.layout(name, model)
        return TensorBytes(info, self._entries[info.storage.entry], self._fetcher, order)

    async def read(
        self, name: str, model: str | None = None, order: Order = "default", *, index: Index | None = None
    ) -> bytes:
        """The tensor's bytes: memory order ("default") or row-major ("contiguous"). With `index`
        (NumPy basic indexing, e.g. `np.s_[0:128, :, 4:8]`), the row-major bytes of that slice,
        reading only the byte runs it covers (reader.bodies.tensor_slice); a slice is always row-major."""
        if index is not None:
            return await SliceBytes(self.tensor(name, model, "contiguous"), index).read()
        return await self.tensor(name, model, order).read()

    async def read_into(
        self, name: str, buffer: WritableBuffer, model: str | None = None, order: Order = "default"
    ) -> None:
        """The tensor's bytes, as `read` gives them, into `buffer`: a writable contiguous buffer of
        exactly its size (a NumPy array, a bytearray). From a local archive a tensor stored in
        that order is read straight into it: no bytes object, no second copy. If it raises, the
        buffer's contents are undefined (the bytes may be in it before their CRC-32 fails)."""
        tensor = self.tensor(name, model, order)
        size = memoryview(buffer).nbytes
        if size != tensor.length:
            raise ValueError(f"{name!r} is {tensor.length} bytes; the buffer holds {size}")
        await tensor.read_into(buffer)

    async def read_many(
        self, names: Iterable[str], model: str | None = None, order: Order = "default"
    ) -> dict[str, bytes]:
        """Several tensors' bytes, as `read` gives them; payloads that lie close together in the
        archive are fetched in one request (remotely: one round trip for a whole block)."""
        tensors = {name: self.tensor(name, model, order) for name in names}
        return dict(zip(tensors, await read_all(list(tensors.values()), self._fetcher)))

    def stream(
        self,
        name: str,
        model: str | None = None,
        order: Order = "default",
        start: int = 0,
        end: int | None = None,
        chunk_size: int | None = None,
    ) -> AsyncIterator[bytes | memoryview]:
        """Bytes [start, end) of what `read` returns, in chunks, without holding the whole tensor
        when it is stored in the requested order."""
        return self.tensor(name, model, order).chunks(start, end, chunk_size)

    async def read_numpy(
        self, name: str, model: str | None = None, *, index: Index | None = None
    ) -> np.ndarray:
        """An ndarray with the logical shape (bfloat16/float8 via ml_dtypes; complex32 widened).
        With `index` (NumPy basic indexing: ints, slices with steps, `...`, np.newaxis as `(None,)`),
        `full[index]`, reading only the byte runs the slice covers."""
        tensor = self.tensor(name, model, "contiguous")
        if index is not None:
            sliced = SliceBytes(tensor, index)
            return to_numpy(await sliced.read(), dtype_of(tensor.info.dtype), sliced.plan.shape)
        info = tensor.info
        return to_numpy(await tensor.read(), dtype_of(info.dtype), info.sizes)  # type: ignore[arg-type]

    async def load(
        self,
        model: str | None = None,
        *,
        prefix: str | None = None,
        names: Sequence[str] | None = None,
        order: Order = "default",
        copy: bool = False,
        verify: bool | None = None,
        shard: Shard | None = None,
    ) -> dict[str, np.ndarray]:
        """Every readable tensor of one model (the named one, else the default), those whose names
        start with `prefix`, or exactly `names`, as arrays: read as a plan of a few large ranges
        (remotely: parallel parts), each storage once. Tied names and views share memory as
        torch's state dict shares storage; non-dense views keep their strides (`order=
        "contiguous"`: row-major copies). From a local file, stored payloads are memory-mapped
        and the arrays are read-only views read when touched (`copy=True`: owned arrays).
        Whatever is read is checked against its CRC-32 (`verify=True` also checks mapped views).
        `shard=reader.Shard(rank, world_size, dims)`: the rank's blocks of the tensors it names.
        Raises and returns nothing if any part fails (SourceChanged if the object changed)."""
        selection = Selection(model, prefix, names, order, copy, verify, shard)
        return await load_arrays(self, selection)

    def iter_load(
        self,
        model: str | None = None,
        *,
        prefix: str | None = None,
        names: Sequence[str] | None = None,
        order: Order = "default",
        copy: bool = False,
        verify: bool | None = None,
        shard: Shard | None = None,
        max_buffered: int | None = None,
    ) -> AsyncIterator[tuple[str, np.ndarray]]:
        """What `load` returns, as (name, array) pairs in the order the storages land: the same
        plan, reads and checks. An array is handed over once its storage is in and checked (tied
        names and views with it) and is never written again; a failure is raised from the loop.
        Leaving the loop early: `async with contextlib.aclosing(ar.iter_load()) as it` cancels the
        reads at once. Memory (remote sources): storages read ahead of the consumer and those being
        read hold at most `max_buffered` bytes (None: PT2SERVE_MAX_BUFFERED, else 256 MiB); a
        storage bigger than that is read alone. A storage's bytes count until the loop asks for the
        next item after its arrays."""
        selection = Selection(model, prefix, names, order, copy, verify, shard)
        return iter_arrays(self, selection, budget_bytes(max_buffered))

    def payloads(self) -> Payloads:
        """What a load reads through (reader.loading): the source, the entries and the fetcher."""
        return Payloads(self.source, self._entries, self._fetcher)

    @property
    def executorch_files(self) -> list[EmbeddedFile]:
        """The ExecuTorch programs (and any other files) stored under data/executorch/."""
        return list(self._executorch.values())

    def executorch_file(self, name: str) -> EntryBytes:
        """One file under data/executorch/ by its name there: `length`, `read()`, `chunks(start, end)`."""
        found = self._executorch.get(name)
        if found is None:
            have = ", ".join(self._executorch) or "none"
            raise FileNotFound(f"no ExecuTorch file {name!r} in this archive (files: {have})")
        return EntryBytes(self._entries[found.entry], self._fetcher)

    async def graph(self, model: str | None = None, *, max_bytes: int = MAX_PROGRAM_BYTES) -> Graph:
        """The model's exported program graph, read from models/<model>.json on first use only
        (one ranged read, CRC-checked, parsed on a worker thread) and kept, as is a graph that
        failed to parse (only a failed read is tried again). ArchiveFormatError if the entry is
        missing, malformed, larger than `max_bytes` or than what the archive's metadata cap
        (reader.entries.budget) leaves, or holds more values than pt2.graph allows."""
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
            task = asyncio.ensure_future(self._read_graph(entry, model))
            self._graphs[model] = task
        return await asyncio.shield(task)

    async def consumers(self, name: str, model: str | None = None) -> TensorConsumers:
        """The graph nodes that read a tensor (or a tied alias of it: same payload, same view)."""
        info = self.layout(name, model)
        return consumers_of(await self.graph(info.model), info, self.tensors(info.model))

    async def _read_graph(self, entry: ZipEntry, model: str) -> Graph:
        return await asyncio.to_thread(parse_graph, await self._fetcher.read(entry), model, entry.name)

    def resolve_model(self, model: str | None) -> str:
        """The model a call means: the named one, else the only one, else "model"."""
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
