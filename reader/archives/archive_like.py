"""ArchiveLike: what every opened archive offers, one `Archive` or a sharded checkpoint's shards.

`open_archive` returns one, so code written against it reads either kind; both `Archive` and
`ShardedArchive` satisfy it (tests/test_public_surface.py checks that they do, and that every
public signature spells out its keywords).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, Self, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from ..bodies.entry import EntryBytes
    from ..bodies.tensor import Order, TensorBytes, WritableBuffer
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

    Which read to use when: docs/api.md ("Reading tensors")."""

    container: str  # "pt2", "checkpoint", "aoti", "pt2+aoti", "sharded-checkpoint"

    @property
    def source(self) -> SourceLike: ...

    @property
    def location(self) -> str: ...

    @property
    def identity(self) -> str: ...

    @property
    def stats(self) -> dict[str, dict[str, int]]: ...

    @property
    def models(self) -> list[str]: ...

    @property
    def unreadable(self) -> dict[str, str]: ...

    def resolve_model(self, model: str | None) -> str: ...

    def tensors(self, model: str | None = None) -> list[TensorInfo]: ...

    def layout(self, name: str, model: str | None = None) -> TensorInfo: ...

    def tensor(self, name: str, model: str | None = None, order: Order = "default") -> TensorBytes: ...

    async def read(
        self, name: str, model: str | None = None, order: Order = "default", *, index: Index | None = None
    ) -> bytes: ...

    async def read_into(
        self, name: str, buffer: WritableBuffer, model: str | None = None, order: Order = "default"
    ) -> None: ...

    async def read_many(
        self, names: Iterable[str], model: str | None = None, order: Order = "default"
    ) -> dict[str, bytes]: ...

    async def read_numpy(
        self, name: str, model: str | None = None, *, index: Index | None = None
    ) -> np.ndarray: ...

    def stream(
        self,
        name: str,
        model: str | None = None,
        order: Order = "default",
        start: int = 0,
        end: int | None = None,
        chunk_size: int | None = None,
    ) -> AsyncIterator[bytes | memoryview]: ...

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
    ) -> dict[str, np.ndarray]: ...

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
    ) -> AsyncIterator[tuple[str, np.ndarray]]: ...

    @property
    def executorch_files(self) -> list[EmbeddedFile]: ...

    def executorch_file(self, name: str) -> EntryBytes: ...

    async def graph(self, model: str | None = None, *, max_bytes: int = ...) -> Graph: ...

    async def consumers(self, name: str, model: str | None = None) -> TensorConsumers: ...

    async def revalidate(self) -> bool: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...
