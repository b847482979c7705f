"""open_archive: a location (a path, a URL, a sharded checkpoint's index, an open source) to an
opened archive (`ArchiveLike`: an `Archive` or a `ShardedArchive`), through the local cache when one
is set (reader.cache)."""

from __future__ import annotations

import copy
import os
from collections.abc import Awaitable, Generator, Mapping
from typing import Any

from ..cache import CacheStore, cache_store, offline_for, open_cached, stale_if_error_for
from ..entries.fetcher import EntryFetcher
from ..entries.opening import OpenedIndex, read_index
from ..entries.parsing import ParseBudget, parse_timeout_for
from ..errors import NotCached, SourceChanged
from ..sources import (
    DEFAULT_CHUNK_SIZE,
    ByteSource,
    HttpOptions,
    S3Settings,
    is_remote,
    open_source,
    redact_location,
    tail_size_for,
)
from .archive import Archive
from .archive_like import ArchiveLike
from .sharded import is_shard_index, open_sharded


class open_archive:  # noqa: N801 - used like a function: `async with open_archive(...)`
    """Open a .pt2 archive: `async with open_archive(path) as ar` or `ar = await open_archive(path)`.

    `location` is a path, an http(s):// URL, s3://bucket/key, gs://bucket/object,
    az://container/blob, hf://[datasets/]repo[@revision]/path, or an open ByteSource; a location ending in
    `.index.json` is a sharded checkpoint's index, opened as one `ShardedArchive` over the shards it
    names (reader.archives.sharded), each opened with these same options. `tail_size` is
    how much of the end the first read takes (enough for typical central directories; by default 256
    KiB remotely, 64 KiB for local files, where one more read is cheap); `chunk_size` is the default
    stream chunk; `http_options` tune remote reads (timeouts, retries, budgets); `s3_settings`
    replace the AWS credential chain with explicit settings. `cache_dir` (default: PT2SERVE_CACHE_DIR)
    keeps the bytes a remote archive's reads fetch on disk by location and version, and `offline`
    opens the version cached last with no request (default: PT2SERVE_OFFLINE, or HF_HUB_OFFLINE for
    hf://). `stale_if_error` (default: PT2SERVE_CACHE_STALE_IF_ERROR, on) lets a cached open whose
    origin cannot be reached at all (refused, no such host, timed out; not an HTTP status) open the
    last complete version cached, with `ar.revalidated` False and `ar.stale` saying which; False: such
    an open raises OriginUnreachable (a SourceError). See docs/cache.md. `parse_timeout` (default:
    PT2SERVE_PARSE_TIMEOUT, else 30; `math.inf`: no bound) is how many seconds an open may spend
    parsing what it read (directory, configs, pickles), which it does on a worker thread: past it the
    open fails with an ArchiveFormatError.
    """

    def __init__(
        self,
        location: str | os.PathLike[str] | ByteSource,
        *,
        tail_size: int | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        http_options: HttpOptions | None = None,
        s3_settings: S3Settings | None = None,
        cache_dir: str | os.PathLike[str] | CacheStore | None = None,
        offline: bool | None = None,
        stale_if_error: bool | None = None,
        parse_timeout: float | None = None,
    ) -> None:
        self._location = location
        self._parse_timeout = parse_timeout_for(parse_timeout)  # a bad value fails here, not later
        self._cache_dir = cache_dir
        self._offline = offline
        self._stale_if_error = stale_if_error
        self._tail_size = tail_size
        self._chunk_size = chunk_size
        self._http_options = http_options
        self._s3_settings = s3_settings
        self._archive: ArchiveLike | None = None

    async def _open(self) -> ArchiveLike:
        location = self._location
        tail_size = tail_size_for(location) if self._tail_size is None else self._tail_size
        if isinstance(location, (str, os.PathLike)):
            source = await self._open_source(os.fspath(location), tail_size)
        else:
            source = location
        if is_shard_index(location):  # a sharded checkpoint: its shards, each opened as this one is
            source = await _confirmed(source)
            budget = ParseBudget(self._parse_timeout, redact_location(source.location))
            sharded = await open_sharded(
                os.fspath(location), source, lambda shard: self._at(shard)._open(), budget
            )
            if source.cached:  # the index was read whole: it opens with no request
                source.version.mark_complete()
            return sharded
        try:
            budget = ParseBudget(self._parse_timeout, redact_location(source.location))
            opened = await _read_index(source, tail_size, budget)
            if source.cached:  # read from disk while the origin was asked
                current = await source.current()
                if current is not source or opened is None:  # the object is another version now
                    source = current
                    opened = await read_index(source, tail_size, budget)
                source.version.mark_complete()  # every byte an open reads is in
        except BaseException:
            await source.close()
            raise
        return Archive(source, opened, EntryFetcher(source, self._chunk_size, opened.data_offsets))

    def _at(self, location: str) -> open_archive:
        """The same options at another location (a shard beside a sharded checkpoint's index)."""
        other = copy.copy(self)
        other._location, other._archive = location, None
        return other

    async def _open_source(self, location: str, tail_size: int) -> ByteSource:
        def open_remote(pinned: Mapping[str, Any] | None = None) -> Awaitable[ByteSource]:
            return open_source(
                location,
                tail_size=tail_size,
                http_options=self._http_options,
                s3_settings=self._s3_settings,
                pinned=pinned,
            )

        if not is_remote(location):
            return await open_remote()
        offline = offline_for(location, self._offline)
        store = cache_store(self._cache_dir)
        if store is None:
            if offline:
                raise NotCached(
                    f"{redact_location(location)}: offline needs a cache (cache_dir= or PT2SERVE_CACHE_DIR)"
                )
            return await open_remote()
        stale_if_error = stale_if_error_for(self._stale_if_error)
        return await open_cached(
            location, store, offline=offline, open_remote=open_remote, stale_if_error=stale_if_error
        )

    def __await__(self) -> Generator[Any, None, ArchiveLike]:
        return self._open().__await__()

    async def __aenter__(self) -> ArchiveLike:
        self._archive = await self._open()
        return self._archive

    async def __aexit__(self, *exc_info: object) -> None:
        if self._archive is not None:
            await self._archive.close()


async def _read_index(source: ByteSource, tail_size: int, budget: ParseBudget) -> OpenedIndex | None:
    """The index; None where a cached version turned out to be outdated while it was read."""
    try:
        return await read_index(source, tail_size, budget)
    except SourceChanged:
        if source.cached:
            return None
        raise


async def _confirmed(source: ByteSource) -> ByteSource:
    """The source of the version the object is now (a cached copy's, once the origin confirmed it)."""
    try:
        return await source.current()
    except BaseException:
        await source.close()
        raise
