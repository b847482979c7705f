"""CachedSource: a remote source whose bytes are kept on local disk by the version opened.

Reads are served from the cache when every byte they ask for is in, else the missing spans are
fetched from the remote source (pinned to the version opened, as every remote read is), written to
the cache and then served from it. Offline (no remote source) a miss is a `NotCached` error.

A version already cached opens before the origin has answered whether it is still current: the
index is read from disk while that one request is under way, and `current()` (which the open awaits
before handing the archive out) gives this source when the origin confirms it, else a source for the
version the object is now. No byte of the cached version reaches a caller unconfirmed: until then a
read needing the origin waits for the answer, and a read of a version that changed is SourceChanged.

Stale-if-error: when that one request gets no answer at all (OriginUnreachable: refused, no such
host, every attempt timed out; never an HTTP status), `current()` gives the last complete version
cached instead, with no remote (reads of bytes never fetched are NotCached, as offline), says so in
`stale` and logs a warning. Its `revalidate()` asks the origin again and, once it answers that the
version is still current, reads through it as any confirmed version does.
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ..errors import NotCached, OriginUnreachable, SourceChanged
from ..sources.base import (
    DEFAULT_CHUNK_SIZE,
    ByteSource,
    Checked,
    Landed,
    SourceStats,
    check_range,
    fresh_buffer,
    redact_location,
)
from .store import CachedVersion, CacheStore

if TYPE_CHECKING:
    from ..sources.http import HttpSource

WRITE_SIZE = 8 << 20  # bytes gathered per write to the cache

log = logging.getLogger("reader.cache")

OpenRemote = Callable[[Mapping[str, Any] | None], Awaitable["HttpSource"]]


@dataclass(frozen=True)
class Stale:
    """A cached version opened without the origin's word (stale-if-error): which one, since when
    the origin last confirmed it, and why it could not be asked."""

    location: str
    version: str
    confirmed_at: float  # seconds since the epoch
    reason: str

    @property
    def age(self) -> float:
        """Seconds since the origin last said this version is current."""
        return max(0.0, time.time() - self.confirmed_at)

    def describe(self) -> str:
        return f"{self.location}: version {self.version}, {_age_text(self.age)} old"


class CachedSource(ByteSource):
    """The ByteSource contract over a cached version, filled from `remote` (None: offline)."""

    mappable = True  # what `fill` fetched is read through a mapping of the cached file
    cached = True
    reports_crcs = True  # a miss streams from the remote source, which tells `checked`

    def __init__(
        self,
        version: CachedVersion,
        remote: HttpSource | None,
        key: str,
        store: CacheStore,
        *,
        confirming: asyncio.Future[HttpSource] | None = None,
        open_remote: OpenRemote | None = None,
        stale_if_error: bool = False,
        stale: Stale | None = None,
    ) -> None:
        self.version = version
        self.remote = remote
        self.store = store
        self.key = key  # the cache key (keys.py): what the store is asked by
        self.location = redact_location(key)  # what messages show
        self.size = version.size
        self.identity: str = version.meta["version"]
        self.stats = remote.stats if remote is not None else SourceStats()
        self.revalidated = remote is not None  # the origin answered that this version is current
        self.stale = stale  # opened without the origin's word, as it could not be reached
        self._confirming = confirming  # the origin's open with this version pinned, under way
        self._open_remote = open_remote  # how to ask the origin again (a stale version's revalidate)
        self._stale_if_error = stale_if_error
        self._successor: CachedSource | None = None  # the version the object is now, if not this

    async def current(self) -> CachedSource:
        """This source once the origin confirms its version, else one for the version the object
        is now (this one's version closed). Errors of the origin's open are raised here."""
        if self._confirming is not None:
            confirming, self._confirming = self._confirming, None
            try:
                remote = await confirming
            except OriginUnreachable as error:
                if not self._stale_if_error:
                    raise
                self._successor = self._fall_back(error)
                return self._successor or self
            if self._same_version(remote):
                self._adopt(remote)
            else:
                self.version.close()
                self._successor = await keep_version(remote, self.key, self.store)
        return self._successor or self

    def _adopt(self, remote: HttpSource) -> None:
        """Read through `remote`, which the origin opened as this very version."""
        for purpose, counted in self.stats.by_purpose.items():  # what the open read from disk
            remote.stats.record(purpose, counted.bytes, requests=counted.requests)
        self.remote, self.stats = remote, remote.stats
        self.revalidated, self.stale = True, None
        self.version.touch()  # used now: the last to be evicted
        self.version.confirm()

    def _fall_back(self, error: OriginUnreachable) -> CachedSource | None:
        """The origin is unreachable: the last complete version cached, read with no remote (None:
        this one), or `error` again when no version is complete."""
        complete = self.store.latest(self.key, complete=True)
        if complete is None:
            raise OriginUnreachable(f"{error}; no complete version of it in the cache {self.store.root}")
        stale = Stale(self.location, complete.meta["version"], complete.confirmed_at(), str(error))
        log.warning("origin unreachable, serving the cached %s (%s)", stale.describe(), error)
        complete.touch()
        if complete.path == self.version.path:
            self.stale = stale
            return None
        self.version.close()
        return CachedSource(complete, None, self.key, self.store, open_remote=self._open_remote, stale=stale)

    # -- the ByteSource contract -----------------------------------------------------------

    async def read(self, start: int, end: int, *, purpose: str = "data") -> bytes:
        buffer = fresh_buffer(end - start)
        await self.read_into(start, buffer, purpose=purpose)
        return buffer.tobytes()

    async def read_into(
        self, start: int, buffer: memoryview, *, purpose: str = "data", landed: Landed | None = None
    ) -> None:
        end = start + len(buffer)
        check_range(self, start, end)
        await self.fill([(start, end)], purpose=purpose)
        self.version.pread_into(start, buffer)
        self.stats.record("cache", end - start, requests=0)

    async def stream(
        self,
        start: int,
        end: int,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        purpose: str = "data",
        checked: Checked | None = None,
    ) -> AsyncIterator[bytes]:
        check_range(self, start, end)
        if self.version.missing(start, end) and await self._remote() is not None:
            # a miss streams as it arrives (the bytes are written on the way) rather than after all of it
            async for chunk in self._through(start, end, chunk_size, purpose, checked):
                yield chunk
            return
        async for chunk in ByteSource.stream(self, start, end, chunk_size=chunk_size, purpose=purpose):
            yield chunk

    def _same_version(self, remote: HttpSource) -> bool:
        pinned = remote.pinned()
        return self.store.folder(self.key, remote.identity, remote.size, pinned) == self.version.path

    async def revalidate(self) -> bool:
        """Offline, the cached version is the one opened by definition. A stale one asks the origin
        again (its error if still unreachable): still this version, and reads go through it."""
        if self.stale is not None and self._open_remote is not None:
            remote = await self._open_remote(self.version.meta["pinned"])
            if not self._same_version(remote):
                await remote.close()
                return False
            log.warning("origin reachable again: %s is current", self.stale.describe())
            self._adopt(remote)
            return True
        remote = await self._remote()
        return True if remote is None else await remote.revalidate()

    async def close(self) -> None:
        self.version.close()
        if self._confirming is not None:  # closed before the origin answered: its source too
            confirming, self._confirming = self._confirming, None
            confirming.cancel()  # an open cancelled closes what it opened
            await asyncio.wait([confirming])
            if not confirming.cancelled() and confirming.exception() is None:
                self.remote = confirming.result()
        if self.remote is not None:
            await self.remote.close()

    async def _remote(self) -> HttpSource | None:
        """The origin's source for this version (None offline); SourceChanged if the object is now
        another version than the one cached."""
        if self._confirming is not None and await self.current() is not self:
            raise SourceChanged(f"{self.location} is no longer version {self.identity}")
        return self.remote

    # -- the cache -------------------------------------------------------------------------

    def covers(self, start: int, end: int) -> bool:
        return not self.version.missing(start, end)

    async def fill(self, spans: Iterable[tuple[int, int]], *, purpose: str = "data") -> None:
        """Make every byte of `spans` be in the cache (fetching the missing parts), or raise."""
        fetched = False
        for start, end in spans:
            for gap_start, gap_end in self.version.missing(start, end):
                if await self._remote() is None:
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
        """Whether entry `name` (with `crc`) passed its CRC-32 in full for this version."""
        return self.version.verified(name, crc)

    def mark_verified(self, name: str, crc: int) -> None:
        self.version.mark_verified(name, crc)

    async def _through(
        self, start: int, end: int, chunk_size: int, purpose: str, checked: Checked | None = None
    ) -> AsyncIterator[bytes]:
        """[start, end) from the remote source, yielded as it arrives and written to the cache
        WRITE_SIZE at a time (big writes: see CachedVersion.write), each batch counted as in once it
        is written whole. A cut stream keeps what arrived whole; a caller that stops early too."""
        assert self.remote is not None
        written = at = start
        pending: list[bytes] = []
        try:
            chunks = self.remote.stream(start, end, chunk_size=chunk_size, purpose=purpose, checked=checked)
            async for chunk in chunks:
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
            self.version.flush()  # the fill's bytes, then its markers, on disk

    def _keep(self, start: int, end: int, pieces: list[bytes]) -> None:
        if pieces:
            self.version.write(start, pieces)
            self.version.mark(start, end)


async def keep_version(remote: HttpSource, key: str, store: CacheStore) -> CachedSource:
    """The cache's version of what `remote` opened (the tail the open read kept in it)."""
    try:
        version = store.version(key, remote.identity, remote.size, remote.pinned())
        held = remote.held
        if held is not None:  # the tail the open read: the next open finds it here
            version.write(held.start, [held.data])
            version.mark(held.start, held.start + len(held.data))
            version.flush()
        version.confirm()
        store.evict(keep=version.path)
    except BaseException:
        await remote.close()
        raise
    return CachedSource(version, remote, key, store)


def needs_full_check(source: ByteSource, name: str, crc: int) -> bool:
    """Whether a mapped entry must be CRC-checked in full though the caller did not ask: a cache's
    entry (its bytes came from afar) not yet checked for this version. Other sources' mapped bytes
    are checked where the caller asks."""
    return source.cached and not cast(CachedSource, source).verified(name, crc)


def full_check_passed(source: ByteSource, name: str, crc: int) -> None:
    """Entry `name` (with `crc`) passed its CRC-32 in full: a cache remembers it for this version."""
    if source.cached:
        cast(CachedSource, source).mark_verified(name, crc)


def _age_text(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
