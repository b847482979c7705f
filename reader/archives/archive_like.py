"""ArchiveLike: what every opened archive offers, one `Archive` or a sharded checkpoint's shards.

`open_archive` returns one, so code written against it reads either kind; both `Archive` and
`ShardedArchive` satisfy it. The members a user needs and their docstrings are here, once;
tests/test_public_surface.py checks that both classes offer exactly these (and the members
reader.archives.deprecated keeps for one release), in one parameter order, every keyword spelled out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, Self, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from ..bodies.entry import EntryBytes
    from ..bodies.tensor import Order, TensorBytes
    from ..loading.shards import Shard
    from ..pt2.executorch import EmbeddedFile
    from ..pt2.graph import Graph, TensorConsumers
    from ..pt2.slicing import Index
    from ..pt2.tensorinfo import TensorInfo
    from ..sources import SourceStats


class SourceLike(Protocol):
    """What `archive.source` offers whatever the archive: its one source, or a sharded checkpoint's
    index and shards together (versions, metrics, ETags)."""

    location: str
    size: int
    identity: str
    local: bool  # every byte from a file on this machine

    @property
    def stats(self) -> SourceStats: ...

    async def revalidate(self) -> bool: ...

    async def close(self) -> None: ...


@runtime_checkable
class ArchiveLike(Protocol):
    """An opened archive: look tensors up by name, read them, load many at once.

    Why 21 methods: the 19 members a user needs (each a fact of the archive or a way to read it, no
    plumbing: tests/test_public_surface.py) and the two of `async with`.

    Every read takes what it reads first (`name`, or `names`), then everything else by keyword:
    `model=` (None: the only model, else "model"), `order=` ("default": memory order, views keep
    their strides; "contiguous": row-major), `index=` (NumPy basic indexing). Which read to use
    when: docs/api.md ("Reading tensors"). Bytes in a buffer of one's own or in chunks come from
    the handle `tensor(name)` gives (`read_into`, `chunks`).
    """

    container: str  # "pt2", "checkpoint", "aoti", "pt2+aoti", "sharded-checkpoint"

    @property
    def source(self) -> SourceLike:
        """What the bytes come from: `location`, `identity` (changes whenever the bytes may have
        changed: ETags), `stats`, `revalidate`, `close`."""

    @property
    def stats(self) -> dict[str, dict[str, int]]:
        """Requests made and bytes read so far, by purpose ("open", "data")."""

    @property
    def models(self) -> list[str]: ...

    @property
    def unreadable(self) -> dict[str, str]:
        """Models present whose weights exist only in compiled code, with why they cannot be read."""

    def resolve_model(self, model: str | None) -> str:
        """The model a call means: the named one, else the only one, else "model"."""

    def tensors(self, *, model: str | None = None) -> list[TensorInfo]:
        """Every tensor of one model, or of every model when model is None."""

    def layout(self, name: str, *, model: str | None = None) -> TensorInfo:
        """One tensor's layout: dtype, sizes, strides, storage (TensorNotFound with close matches)."""

    def tensor(self, name: str, *, model: str | None = None, order: Order = "default") -> TensorBytes:
        """One tensor in one order, checked readable once: its `length`, `read()`,
        `read_into(buffer, start)` (straight into a writable buffer of one's own: locally one read,
        no bytes object) and `chunks(start, end, chunk_size)` (bounded memory, each chunk checked as
        the CRC-32 allows)."""

    async def read(
        self, name: str, *, model: str | None = None, order: Order = "default", index: Index | None = None
    ) -> bytes:
        """The tensor's bytes: memory order ("default") or row-major ("contiguous"). With `index`
        (NumPy basic indexing, e.g. `np.s_[0:128, :, 4:8]`), the row-major bytes of that slice,
        reading only the byte runs it covers (reader.bodies.tensor_slice); a slice is always row-major."""

    async def read_many(
        self, names: Iterable[str], *, model: str | None = None, order: Order = "default"
    ) -> dict[str, bytes]:
        """Several tensors' bytes, as `read` gives them; payloads that lie close together in the
        archive are fetched in one request (remotely: one round trip for a whole block)."""

    async def read_numpy(
        self, name: str, *, model: str | None = None, index: Index | None = None
    ) -> np.ndarray:
        """An ndarray with the logical shape (bfloat16/float8 via ml_dtypes; complex32 widened).
        With `index` (NumPy basic indexing: ints, slices with steps, `...`, np.newaxis as `(None,)`),
        `full[index]`, reading only the byte runs the slice covers."""

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
        """Every readable tensor of one model (the named one, else the default), those whose names
        start with `prefix`, or exactly `names`, as arrays: read as a plan of a few large ranges
        (remotely: parallel parts), each storage once. Tied names and views share memory as
        torch's state dict shares storage; non-dense views keep their strides (`order=
        "contiguous"`: row-major copies). From a local file, stored payloads are memory-mapped
        and the arrays are read-only views read when touched (`copy=True`: owned arrays).
        Whatever is read is checked against its CRC-32 (`verify=True` also checks mapped views).
        `shard=reader.Shard(rank, world_size, dims)`: the rank's blocks of the tensors it names.
        Raises and returns nothing if any part fails (SourceChanged if the object changed)."""

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
        """What `load` returns, as (name, array) pairs in the order the storages land: the same
        plan, reads and checks. An array is handed over once its storage is in and checked (tied
        names and views with it) and is never written again; a failure is raised from the loop.
        Leaving the loop early: `async with contextlib.aclosing(ar.iter_load()) as it` cancels the
        reads at once. Memory (remote sources): storages read ahead of the consumer and those being
        read hold at most `max_buffered` bytes (None: PT2SERVE_MAX_BUFFERED, else 256 MiB); a
        storage bigger than that is read alone. A storage's bytes count until the loop asks for the
        next item after its arrays."""

    @property
    def executorch_files(self) -> list[EmbeddedFile]:
        """The ExecuTorch programs (and any other files) stored under data/executorch/."""

    def executorch_file(self, name: str) -> EntryBytes:
        """One file under data/executorch/ by its name there: `length`, `read()`, `chunks(start, end)`."""

    async def graph(self, *, model: str | None = None, max_bytes: int = ...) -> Graph:
        """The model's exported program graph, read from models/<model>.json on first use only
        (one ranged read, CRC-checked, parsed on a worker thread) and kept, as is a graph that
        failed to parse (only a failed read is tried again). ArchiveFormatError if the entry is
        missing, malformed, larger than `max_bytes` or than what the archive's metadata cap
        (reader.entries.budget) leaves, or holds more values than pt2.graph allows."""

    async def consumers(self, name: str, *, model: str | None = None) -> TensorConsumers:
        """The graph nodes that read a tensor (or a tied alias of it: same payload, same view)."""

    async def revalidate(self) -> bool:
        """True if what was opened is still there unchanged (a cheap conditional request remotely)."""

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...
