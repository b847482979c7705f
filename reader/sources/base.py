"""What every byte source offers, and how it counts its work.

A source knows nothing about ZIP: it hands out exact byte ranges of one
object and counts requests and bytes by purpose ("open" vs "data").
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

# bench/stream_local.py's sweep: 4 MiB streams fastest against a pread loop of the same size
# (1 MiB within noise, 256 KiB clearly slower); the service sets its own (PT2SERVE_CHUNK_SIZE).
DEFAULT_CHUNK_SIZE = 4 << 20
# How much of the end an open reads first. Remotely, one request should hold the end
# records, the central directory and often the configs; locally another read costs
# microseconds while a bigger buffer costs page faults, so local files read less
# (sources.tail_size_for picks one).
DEFAULT_TAIL_SIZE = 256 << 10
LOCAL_TAIL_SIZE = 64 << 10


@dataclass
class PurposeStats:
    requests: int = 0
    bytes: int = 0


@dataclass
class SourceStats:
    """Requests made and bytes received, per purpose."""

    by_purpose: dict[str, PurposeStats] = field(default_factory=dict)

    def record(self, purpose: str, nbytes: int, *, requests: int = 1) -> None:
        stats = self.by_purpose.setdefault(purpose, PurposeStats())
        stats.requests += requests
        stats.bytes += nbytes

    def add_bytes(self, purpose: str, nbytes: int) -> None:
        self.record(purpose, nbytes, requests=0)

    @property
    def requests(self) -> int:
        return sum(stats.requests for stats in self.by_purpose.values())

    @property
    def bytes(self) -> int:
        return sum(stats.bytes for stats in self.by_purpose.values())

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {purpose: {"requests": s.requests, "bytes": s.bytes} for purpose, s in self.by_purpose.items()}


# told of archive bytes [at, at + nbytes) as they land in a read_into's buffer (HttpSource's)
Landed = Callable[[int, int], None]


class ByteSource(Protocol):
    """Exact byte ranges of one immutable object (a file, a URL, an S3 key)."""

    location: str
    size: int
    identity: str  # changes whenever the object's bytes may have changed (ETag, mtime+size)
    stats: SourceStats

    async def read(self, start: int, end: int, *, purpose: str = "data") -> bytes:
        """Bytes [start, end), exactly, or raise SourceError / SourceChanged."""
        ...

    async def read_into(self, start: int, buffer: memoryview, *, purpose: str = "data") -> None:
        """Bytes [start, start + len(buffer)) into `buffer` (writable, format "B"), exactly, or
        raise as `read` does. Local files read straight into it: no bytes object in between."""
        ...

    def stream(
        self, start: int, end: int, *, chunk_size: int = DEFAULT_CHUNK_SIZE, purpose: str = "data"
    ) -> AsyncIterator[bytes]:
        """Bytes [start, end) in chunks of at most chunk_size, exactly."""
        ...

    async def revalidate(self) -> bool:
        """True if the object is still the one opened (cheaply: a stat, a conditional request)."""
        ...

    async def close(self) -> None: ...


def redact_location(location: str) -> str:
    """A location safe to show in errors and listings: no query string (presigned URLs carry
    credentials there), no fragment, no user info."""
    if "://" not in location:
        return location
    scheme, rest = location.split("://", 1)
    rest = rest.split("#", 1)[0].split("?", 1)[0]
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host.rsplit('@', 1)[-1]}{slash}{path}"


def fresh_buffer(length: int) -> memoryview:
    """A writable buffer of its own, uninitialised (what reads it is handed to fill it): unlike
    bytearray(length), no pages are zeroed first."""
    return memoryview(np.empty(length, dtype=np.uint8)).cast("B")


def check_range(source: ByteSource, start: int, end: int) -> None:
    if not 0 <= start <= end <= source.size:
        raise ValueError(f"range [{start}, {end}) is outside {source.location} ({source.size} bytes)")
