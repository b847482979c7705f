"""A local cache of remote archives' bytes, kept by location and the version pinned at open.

open_archive(location, cache_dir=...) (or PT2SERVE_CACHE_DIR) reads a remote archive through it:
the first open fetches and keeps what it reads; a later open asks the origin once whether the
object is still the version cached (the source's own revalidation: a conditional request) and then
reads what is in from disk, memory-mapped for loads as a local archive is. A changed object is a
new version, never the old bytes. Offline (offline=True, PT2SERVE_OFFLINE=1, or HF_HUB_OFFLINE=1
for hf://) the version used last opens with no request at all. When the origin cannot be reached
at all, the last complete version cached opens (stale-if-error; `stale_if_error=False` or
PT2SERVE_CACHE_STALE_IF_ERROR=0: the open fails instead). A location is kept under its cache key
(keys.py): all of it that names the object, query included, signatures left out. See docs/cache.md.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..errors import NotCached
from ..sources import redact_location, split_location
from .keys import KEY_FORMAT, cache_key
from .source import CachedSource, Stale, keep_version
from .store import CachedVersion, CacheStore, VersionInfo

CACHE_DIR_ENV = "PT2SERVE_CACHE_DIR"
CACHE_MAX_BYTES_ENV = "PT2SERVE_CACHE_MAX_BYTES"
OFFLINE_ENV = "PT2SERVE_OFFLINE"
STALE_IF_ERROR_ENV = "PT2SERVE_CACHE_STALE_IF_ERROR"

OpenRemote = Callable[[Mapping[str, Any] | None], Awaitable[Any]]


def cache_store(cache_dir: str | os.PathLike[str] | CacheStore | None) -> CacheStore | None:
    """The cache a call means: the one given, else PT2SERVE_CACHE_DIR's (capped by
    PT2SERVE_CACHE_MAX_BYTES), else none."""
    if isinstance(cache_dir, CacheStore):
        return cache_dir
    folder = cache_dir if cache_dir is not None else os.environ.get(CACHE_DIR_ENV) or None
    if folder is None:
        return None
    cap = os.environ.get(CACHE_MAX_BYTES_ENV)
    return CacheStore(folder, parse_size(cap) if cap else None)


def offline_for(location: str, offline: bool | None) -> bool:
    """Whether an open may make no request: as asked, else PT2SERVE_OFFLINE=1, else (for hf://)
    HF_HUB_OFFLINE=1, as huggingface_hub reads it."""
    if offline is not None:
        return offline
    if _truthy(os.environ.get(OFFLINE_ENV)):
        return True
    return split_location(location).scheme == "hf" and _truthy(os.environ.get("HF_HUB_OFFLINE"))


def stale_if_error_for(stale_if_error: bool | None) -> bool:
    """Whether a cached open may fall back to the version it has when the origin cannot be reached:
    as asked, else PT2SERVE_CACHE_STALE_IF_ERROR (on unless 0, false, no or off)."""
    if stale_if_error is not None:
        return stale_if_error
    value = os.environ.get(STALE_IF_ERROR_ENV)
    return value is None or value.strip().lower() not in ("0", "false", "no", "off")


async def open_cached(
    location: str,
    store: CacheStore,
    *,
    offline: bool,
    open_remote: OpenRemote,
    stale_if_error: bool = True,
) -> CachedSource:
    """`location` through the cache: the version cached (its revalidation started, and awaited by
    `CachedSource.current` once the index is read from disk; `stale_if_error`: the last complete
    version when the origin cannot be reached), an ordinary open when none is, or offline the
    version used last with no request."""
    key = cache_key(location)
    latest = store.latest(key)
    if offline:
        if latest is None:
            shown = redact_location(location)
            raise NotCached(f"{shown}: offline, and no version of it is in the cache {store.root}")
        latest.touch()
        return CachedSource(latest, None, key, store)
    if latest is not None:
        confirming = asyncio.ensure_future(open_remote(latest.meta["pinned"]))
        return CachedSource(
            latest,
            None,
            key,
            store,
            confirming=confirming,
            open_remote=open_remote,
            stale_if_error=stale_if_error,
        )
    remote = await open_remote(None)
    if remote.pinned() is None:  # nothing to pin a cached version to (every remote source has it)
        return remote
    return await keep_version(remote, key, store)


def parse_size(text: str) -> int:
    """Bytes from "500000", "512M", "20G", "1.5T" (powers of 1024)."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(text[-1:], 1)
    number = text[:-1] if scale != 1 else text
    try:
        return int(float(number) * scale)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (bytes, or a number with K, M, G or T)") from None


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


__all__ = [
    "CACHE_DIR_ENV",
    "CACHE_MAX_BYTES_ENV",
    "KEY_FORMAT",
    "OFFLINE_ENV",
    "STALE_IF_ERROR_ENV",
    "CacheStore",
    "CachedSource",
    "CachedVersion",
    "Stale",
    "VersionInfo",
    "cache_key",
    "cache_store",
    "offline_for",
    "open_cached",
    "parse_size",
    "stale_if_error_for",
]
