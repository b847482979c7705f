"""The cache's files: one folder per version of an object, its bytes in a sparse file, marker files
naming what is in it.

    <root>/<object>/                   object: the key's digest (keys.py: the location, its query
                                       included, without signatures; the key format)
        <version>/                     version: SHA-256 of what the source pinned (ETag, size, commit)
            meta.json                  the location shown (no query, no userinfo), the key's
                                       digest and format, the size, the source's pinned validators
            data                       the object's bytes at their own offsets (sparse)
            spans/<start>-<end>        bytes [start, end) of `data` are in, whole
            verified/<crc32>-<name>    an entry whose every byte was CRC-checked here once
            used                       its modification time is the version's last use (LRU)
            confirmed                  its modification time is when the origin last said this
                                       version is current (the age a stale-if-error open reports)
            complete                   every byte an open reads is in: the version opens with no
                                       request (what a stale-if-error open falls back to)

Why markers: bytes count as cached only once their marker is renamed into place, after the bytes
were written, so a cut download or a crashed writer leaves a miss, never half-written bytes; two
processes filling one span write the same bytes (one version's) and rename markers of the same
name. Every file that appears is written to a temporary name first and renamed.

Why syncs: a rename can reach the disk before the bytes it vouches for (a power cut would leave a
marker over zeros). So the bytes are flushed (fdatasync) before their markers are renamed, and the
spans folder after: once per SYNC_BYTES of fill and at the end of each fill, not per write.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from bisect import insort
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SourceError
from ..sources.base import redact_location
from .keys import KEY_FORMAT, key_digest

META = "meta.json"
DATA = "data"
SPANS = "spans"
VERIFIED = "verified"
USED = "used"
CONFIRMED = "confirmed"
COMPLETE = "complete"
SYNC_BYTES = 64 << 20  # bytes written between two flushes of a long fill (markers become durable)
IOV_MAX = 1024  # pieces per pwritev (Linux's UIO_MAXIOV)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def write_atomically(path: Path, data: bytes) -> None:
    """`path` appears whole or not at all (a temporary name in its folder, then a rename)."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@dataclass(frozen=True)
class VersionInfo:
    """One cached version, as `pt2serve cache ls` lists it."""

    path: Path
    location: str
    size: int
    version: str
    on_disk: int  # bytes the version's files take on disk (the sparse file counts what it holds)
    cached: int  # bytes of the object that are in
    used: float  # the last use (seconds since the epoch)

    def to_dict(self) -> dict[str, Any]:
        return {
            "location": self.location,
            "version": self.version,
            "size": self.size,
            "cached": self.cached,
            "on_disk": self.on_disk,
            "used": self.used,
            "path": str(self.path),
        }


class CachedVersion:
    """The files of one version of one object: which spans are in, reads and writes of its bytes."""

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        self.path = path
        self.meta = meta
        self.size: int = meta["size"]
        self._spans: list[tuple[int, int]] = []  # merged, sorted; refreshed from disk on a miss
        self._verified: set[str] | None = None
        self._fd: int | None = None
        self._unsynced: list[tuple[int, int]] = []  # spans in `_spans` whose markers are not on disk yet
        self._unsynced_bytes = 0

    # -- which bytes are in ----------------------------------------------------------------

    def missing(self, start: int, end: int) -> list[tuple[int, int]]:
        """The parts of [start, end) not in the cache (asked of the disk again before answering a
        miss: another process may have filled them)."""
        gaps = _gaps(self._spans, start, end)
        if gaps:
            self._spans = _merged(_read_spans(self.path / SPANS) + self._unsynced)
            gaps = _gaps(self._spans, start, end)
        return gaps

    def cached_bytes(self) -> int:
        self._spans = _merged(_read_spans(self.path / SPANS) + self._unsynced)
        return sum(end - start for start, end in self._spans)

    def write(self, start: int, pieces: Sequence[bytes | memoryview]) -> None:
        """`pieces`, one after another, at `start` of the object, not yet counted as in (see `mark`).

        One write per call, however many pieces: the page cache keeps a file written in big writes
        in big folios, and mapping those back costs a fraction of mapping 64 KiB ones (bench/README.md,
        `cache.py`)."""
        views = [memoryview(piece).cast("B") for piece in pieces if len(piece)]
        while views:
            written = os.pwritev(self._descriptor(), views[:IOV_MAX], start)
            start += written
            while views and written >= len(views[0]):
                written -= len(views.pop(0))
            if written:
                views[0] = views[0][written:]

    def mark(self, start: int, end: int) -> None:
        """Count [start, end) as in: its bytes were all written. In at once for this process (the page
        cache holds them); on disk for others and later opens at the next `flush`, which runs itself
        once SYNC_BYTES are pending."""
        if start < end:
            self._unsynced.append((start, end))
            self._unsynced_bytes += end - start
            insort(self._spans, (start, end))
            self._spans = _merged(self._spans)
            if self._unsynced_bytes >= SYNC_BYTES:
                self.flush()

    def flush(self) -> None:
        """Make the spans marked so far durable: their bytes flushed to disk, then their markers
        renamed into place, then the folder's entries flushed (one sync of each for the batch)."""
        if not self._unsynced:
            return
        pending, self._unsynced, self._unsynced_bytes = self._unsynced, [], 0
        os.fdatasync(self._descriptor())
        for start, end in _merged(pending):
            write_atomically(self.path / SPANS / f"{start}-{end}", b"")
        sync_folder(self.path / SPANS)

    def mark_complete(self) -> None:
        """Every byte an open reads is in (and durable): the version can open with no request."""
        if not (self.path / COMPLETE).exists():
            self.flush()
            write_atomically(self.path / COMPLETE, b"")
            sync_folder(self.path)

    def complete(self) -> bool:
        return (self.path / COMPLETE).exists()

    def confirm(self) -> None:
        """The origin said now that this version is current (as it did when the version was made)."""
        with contextlib.suppress(OSError):
            if (self.path / CONFIRMED).exists():
                os.utime(self.path / CONFIRMED)
            else:
                write_atomically(self.path / CONFIRMED, b"")

    def confirmed_at(self) -> float:
        """When the origin last said this version is current (seconds since the epoch): the
        `confirmed` file's time, else the version's making (meta.json)."""
        for name in (CONFIRMED, META):
            with contextlib.suppress(OSError):
                return (self.path / name).stat().st_mtime
        return 0.0

    def pread_into(self, start: int, buffer: memoryview) -> None:
        while buffer:
            got = os.preadv(self._descriptor(), [buffer], start)
            if got <= 0:
                raise OSError(f"{self.path / DATA}: short read at {start}")
            buffer = buffer[got:]
            start += got

    def descriptor(self) -> int:
        return self._descriptor()

    # -- entries checked in full once ------------------------------------------------------

    def verified(self, name: str, crc: int) -> bool:
        if self._verified is None:  # one listing per open, not a stat per entry
            with contextlib.suppress(OSError):
                self._verified = set(os.listdir(self.path / VERIFIED))
        return _verified_key(name, crc) in (self._verified or ())

    def mark_verified(self, name: str, crc: int) -> None:
        key = _verified_key(name, crc)
        if not self.verified(name, crc):
            write_atomically(self.path / VERIFIED / key, b"")
            self._verified = (self._verified or set()) | {key}

    def touch(self) -> None:
        with contextlib.suppress(OSError):
            os.utime(self.path / USED)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):  # a version evicted meanwhile: its markers go with it
                self.flush()
            os.close(self._fd)
            self._fd = None

    def _descriptor(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path / DATA, os.O_RDWR)
        return self._fd


class CacheStore:
    """A cache folder: versions of objects by location, evicted least recently used first beyond
    `max_bytes` (None: no cap)."""

    def __init__(self, root: str | os.PathLike[str], max_bytes: int | None = None) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes

    def object_path(self, key: str) -> Path:
        """The folder of the object a cache key (keys.py) names. The key's format is part of the
        name, so folders keyed another way are never opened."""
        return self.root / key_digest(key)[:32]

    def folder(self, key: str, version: str, size: int, pinned: dict[str, Any]) -> Path:
        """Where this version of the object is kept: named by everything the source pinned (a Hub
        file's commit besides its ETag, a GCS generation), not its identity alone."""
        return self.object_path(key) / digest(json.dumps([version, size, pinned], sort_keys=True))

    def version(self, key: str, version: str, size: int, pinned: dict[str, Any]) -> CachedVersion:
        """The folder of this version of the object (`folder`), made if new."""
        path = self.folder(key, version, size, pinned)
        meta = {"location": redact_location(key), "key_format": KEY_FORMAT, "key_digest": key_digest(key),
                "version": version, "size": size, "pinned": pinned}  # fmt: skip
        found = _read_meta(path)
        if found is not None and not _names(found, key):
            raise SourceError(
                f"the cache folder {path} holds another object than {redact_location(key)} "
                "(or one kept another way): remove it (pt2serve cache prune) and open again"
            )
        if found is None:
            for folder in (path / SPANS, path / VERIFIED):
                folder.mkdir(parents=True, exist_ok=True)
            if not (path / DATA).exists():
                _sparse_file(path / DATA, size)
            write_atomically(path / USED, b"")
            write_atomically(path / META, json.dumps(meta).encode())
        cached = CachedVersion(path, meta)
        cached.touch()
        return cached

    def latest(self, key: str, *, complete: bool = False) -> CachedVersion | None:
        """The version of the object `key` names used last, or None (what an offline open reads);
        `complete`: the one used last of those that open with no request (what a stale-if-error
        open reads)."""
        found = [(used, path) for path, used in self._versions(self.object_path(key))]
        for _, path in sorted(found, reverse=True):
            meta = _read_meta(path)
            if meta is not None and _names(meta, key):
                if complete and not (path / COMPLETE).exists():
                    continue
                return CachedVersion(path, meta)
        return None

    def list(self) -> list[VersionInfo]:
        listed = []
        if not self.root.is_dir():
            return listed
        for folder in sorted(self.root.iterdir()):
            for path, used in self._versions(folder):
                meta = _read_meta(path)
                if meta is None:
                    continue
                version = CachedVersion(path, meta)
                listed.append(
                    VersionInfo(
                        path,
                        meta["location"],
                        meta["size"],
                        meta["version"],
                        _on_disk(path),
                        version.cached_bytes(),
                        used,
                    )
                )
        return listed

    def evict(self, max_bytes: int | None = None, keep: Path | None = None) -> list[VersionInfo]:
        """Remove the least recently used versions until the cache takes at most `max_bytes` (the
        store's cap by default); never `keep`. Returns what was removed."""
        cap = self.max_bytes if max_bytes is None else max_bytes
        if cap is None:
            return []
        versions = sorted(self.list(), key=lambda info: info.used)
        total = sum(info.on_disk for info in versions)
        removed = []
        for info in versions:
            if total <= cap:
                break
            if info.path == keep:
                continue
            shutil.rmtree(info.path, ignore_errors=True)  # a process reading it keeps its open file
            with contextlib.suppress(OSError):
                info.path.parent.rmdir()  # the object's folder, once it holds no version
            total -= info.on_disk
            removed.append(info)
        return removed

    @staticmethod
    def _versions(folder: Path) -> Iterator[tuple[Path, float]]:
        if not folder.is_dir():
            return
        for path in folder.iterdir():
            try:
                yield path, (path / USED).stat().st_mtime
            except OSError:
                continue  # being made or removed by another process


def sync_folder(folder: Path) -> None:
    """Flush a folder's entries (the renames into it) to disk."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sparse_file(path: Path, size: int) -> None:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        os.ftruncate(fd, size)
        os.close(fd)
        os.link(temporary, path)  # fails if another process made it first: theirs is as good
    except FileExistsError:
        pass
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def _read_meta(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads((path / META).read_bytes())
    except (OSError, ValueError):
        return None


def _names(meta: dict[str, Any], key: str) -> bool:
    """Whether a version's meta.json was written for this very key, in this key format (an entry
    that cannot be told apart from another object's is never read)."""
    return meta.get("key_format") == KEY_FORMAT and meta.get("key_digest") == key_digest(key)


def _read_spans(folder: Path) -> list[tuple[int, int]]:
    spans = []
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            first, _, last = name.partition("-")
            if first.isdigit() and last.isdigit():
                spans.append((int(first), int(last)))
    return spans


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _gaps(spans: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    gaps = []
    at = start
    for first, last in spans:
        if last <= at:
            continue
        if first >= end:
            break
        if first > at:
            gaps.append((at, first))
        at = max(at, last)
        if at >= end:
            break
    if at < end:
        gaps.append((at, end))
    return gaps


def _verified_key(name: str, crc: int) -> str:
    return f"{crc:08x}-{digest(name)}"


def _on_disk(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(folder, name)).st_blocks * 512
    return total
