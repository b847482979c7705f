"""SHA-256 digests of tensor bytes: computed on demand, once per archive version, shared.

A digest is the proof that bytes are right (a ZIP CRC-32 is only a hint: 32 bits,
and not even computable for a view of a shared payload). Computing one means
reading the whole tensor once, so `Digests` caches them for the archive it was
made for (one version: a reopened archive gets a new `Digests`), lets concurrent
askers of one digest share a single computation, and hashes large chunks on a
worker thread (hashlib releases the GIL) so the event loop keeps serving. A view's
digest is of its bytes as read (gathered a chunk at a time: memory bounded whatever
size it declares).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterable
from contextlib import aclosing
from typing import TYPE_CHECKING

from .pt2.gather import amplified
from .pt2.tensorinfo import TensorInfo

if TYPE_CHECKING:
    from .archives.archive_like import ArchiveLike

THREAD_HASH_MIN = 256 << 10  # chunks from this size up are hashed off the event loop
ChunkSource = Callable[[], AsyncIterator[bytes | memoryview]]


async def sha256_of(chunks: AsyncIterator[bytes | memoryview]) -> bytes:
    """The SHA-256 of everything `chunks` yields (the iterator is closed however this ends)."""
    hasher = hashlib.sha256()
    async with aclosing(chunks) as stream:  # type: ignore[type-var]
        async for chunk in stream:
            if len(chunk) >= THREAD_HASH_MIN:
                await asyncio.to_thread(hasher.update, chunk)
            else:
                hasher.update(chunk)
    return hasher.digest()


def repr_digest(digest: bytes) -> str:
    """The RFC 9530 `Repr-Digest` field value for a SHA-256 digest."""
    return f"sha-256=:{base64.b64encode(digest).decode()}:"


class Digests:
    """The digests of one opened archive, by key; `tensor()` keys a tensor's bytes in one order."""

    def __init__(self, archive: ArchiveLike) -> None:
        self.archive = archive
        self._done: dict[Hashable, bytes] = {}
        self._running: dict[Hashable, asyncio.Task[bytes]] = {}
        self.bytes_hashed = 0
        self.seconds = 0.0

    def cached(self, key: Hashable) -> bytes | None:
        return self._done.get(key)

    def remember(self, key: Hashable, digest: bytes) -> None:
        """Record a digest known from elsewhere (a manifest written for this same version)."""
        self._done[key] = digest

    async def of(self, key: Hashable, chunks: ChunkSource) -> bytes:
        """The digest under `key`, computing it from `chunks()` if nobody has yet.

        The computation runs as its own task: an asker that is cancelled (a client
        that left) does not cancel it for the others, and its result is kept.
        A failure is not cached; the next asker tries again.
        """
        done = self._done.get(key)
        if done is not None:
            return done
        task = self._running.get(key)
        if task is None:
            task = asyncio.ensure_future(self._compute(key, chunks))
            self._running[key] = task
            task.add_done_callback(lambda _: self._running.pop(key, None))
        return await asyncio.shield(task)

    async def tensor(self, info: TensorInfo, order: str = "default") -> bytes:
        """The SHA-256 of what `archive.read(info.name, model=info.model, order=order)` returns."""
        return await self.of(
            tensor_key(info, order),
            lambda: self.archive.tensor(info.name, model=info.model, order=order).chunks(),
        )

    async def compute_ahead(self, tensors: Iterable[TensorInfo]) -> None:
        """Fill the cache for every readable tensor in `tensors`, one at a time (a background job).
        Amplified views (`pt2.gather.amplified`: far more bytes declared than lie behind them) are
        left to whoever asks: their digest costs their declared size, which the archive chooses."""
        for info in tensors:
            if info.readable and not amplified(info):
                await self.tensor(info)

    async def _compute(self, key: Hashable, chunks: ChunkSource) -> bytes:
        started = time.perf_counter()
        counted = _Counted(chunks())
        digest = await sha256_of(counted)
        self.bytes_hashed += counted.total
        self.seconds += time.perf_counter() - started
        self._done[key] = digest
        return digest


def tensor_key(info: TensorInfo, order: str = "default", fmt: str = "raw") -> tuple[str, str, str, str]:
    """The cache key of one tensor's bytes in one order and output format."""
    return (info.model, info.name, order, fmt)


class _Counted:
    """An async iterator of chunks that counts the bytes it passed on."""

    def __init__(self, chunks: AsyncIterator[bytes | memoryview]) -> None:
        self.chunks = chunks
        self.total = 0

    def __aiter__(self) -> _Counted:
        return self

    async def __anext__(self) -> bytes | memoryview:
        chunk = await self.chunks.__anext__()
        self.total += len(chunk)
        return chunk

    async def aclose(self) -> None:
        aclose = getattr(self.chunks, "aclose", None)
        if aclose is not None:
            await aclose()


__all__ = [
    "Digests",
    "repr_digest",
    "sha256_of",
    "tensor_key",
]
