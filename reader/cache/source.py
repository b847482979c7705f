"""CachedSource: a remote source whose bytes are kept on local disk by the version opened.

Reads are served from the cache when every byte they ask for is in, else the missing spans are
fetched from the remote source (pinned to the version opened, as every remote read is), written to
the cache and then served from it. Offline (no remote source) a miss is a `NotCached` error.
"""

from __future__ import annotations

import mmap
from collections.abc import AsyncIterator, Iterable

from ..errors import NotCached
from ..sources.base import DEFAULT_CHUNK_SIZE, SourceStats, check_range, fresh_buffer
from ..sources.http import HttpSource
from .store import CachedVersion, CacheStore

WRITE_SIZE = 8 << 20  # bytes gathered per write to the cache


class CachedSource:
    """The ByteSource contract over a cached version, filled from `remote` (None: offline)."""

    def __init__(
        self, version: CachedVersion, remote: HttpSource | None, location: str, store: CacheStore
    ) -> None:
        self.version = version
        self.remote = remote
        self.store = store
        self.location = location
        self.size = version.size
        self.identity: str = version.meta["version"]
        self.stats = remote.stats if remote is not None else SourceStats()

    # -- the ByteSource contract -----------------------------------------------------------

    async def read(self, start: int, end: int, *, purpose: str = "data") -> bytes:
        buffer = fresh_buffer(end - start)
        await self.read_into(start, buffer, purpose=purpose)
        return buffer.tobytes()

    async def read_into(self, start: int, buffer: memoryview, *, purpose: str = "data", **_: object) -> None:
        end = start + len(buffer)
        check_range(self, start, end)
        await self.fill([(start, end)], purpose=purpose)
        self.version.pread_into(start, buffer)
        self.stats.record("cache", end - start, requests=0)

    async def stream(
        self, start: int, end: int, *, chunk_size: int = DEFAULT_CHUNK_SIZE, purpose: str = "data"
    ) -> AsyncIterator[bytes]:
        check_range(self, start, end)
        if self.version.missing(start, end) and self.remote is not None:
            # a miss streams as it arrives (the bytes are written on the way) rather than after all of it
            async for chunk in self._through(start, end, chunk_size, purpose):
                yield chunk
            return
        for at in range(start, end, chunk_size):
            yield await self.read(at, min(end, at + chunk_size), purpose=purpose)

    async def revalidate(self) -> bool:
        """Offline, the cached version is the one opened by definition."""
        return True if self.remote is None else await self.remote.revalidate()

    async def close(self) -> None:
        self.version.close()
        if self.remote is not None:
            await self.remote.close()

    # -- the cache -------------------------------------------------------------------------

    def covers(self, start: int, end: int) -> bool:
        return not self.version.missing(start, end)

    async def fill(self, spans: Iterable[tuple[int, int]], *, purpose: str = "data") -> None:
        """Make every byte of `spans` be in the cache (fetching the missing parts), or raise."""
        fetched = False
        for start, end in spans:
            for gap_start, gap_end in self.version.missing(start, end):
                if self.remote is None:
                    raise NotCached(
                        f"{self.location}: offline, and bytes {gap_start}-{gap_end} of version "
                        f"{self.identity} are not in the cache ({self.version.path})"
                    )
                async for _ in self._through(gap_start, gap_end, DEFAULT_CHUNK_SIZE, purpose):
                    pass
                fetched = True
        if fetched:  # the cache grew: older versions go first if it is over its cap
            self.store.evict(keep=self.version.path)

    def map(self) -> mmap.mmap:
        """The cached bytes mapped copy-on-write, as a local archive is (read only what `covers`)."""
        return mmap.mmap(self.version.descriptor(), self.size, access=mmap.ACCESS_COPY)

    def verified(self, name: str, crc: int) -> bool:
        return self.version.verified(name, crc)

    def mark_verified(self, name: str, crc: int) -> None:
        self.version.mark_verified(name, crc)

    async def _through(self, start: int, end: int, chunk_size: int, purpose: str) -> AsyncIterator[bytes]:
        """[start, end) from the remote source, yielded as it arrives and written to the cache
        WRITE_SIZE at a time (big writes: see CachedVersion.write), each batch counted as in once it
        is written whole. A cut stream keeps what arrived whole; a caller that stops early too."""
        assert self.remote is not None
        written = at = start
        pending: list[bytes] = []
        try:
            async for chunk in self.remote.stream(start, end, chunk_size=chunk_size, purpose=purpose):
                if not isinstance(chunk, bytes):  # kept until written: the caller may not change it
                    chunk = memoryview(chunk).toreadonly()
                pending.append(chunk)
                at += len(chunk)
                if at - written >= WRITE_SIZE:
                    self._keep(written, at, pending)
                    written, pending = at, []
                yield chunk
        finally:
            self._keep(written, at, pending)

    def _keep(self, start: int, end: int, pieces: list[bytes]) -> None:
        if pieces:
            self.version.write(start, pieces)
            self.version.mark(start, end)
