"""What every byte source offers, and how it counts its work.

A source knows nothing about ZIP: it hands out exact byte ranges of one
object and counts requests and bytes by purpose ("open" vs "data").

Besides reading, a source answers what its callers would otherwise learn from its type
(`ByteSource`'s capabilities: whether it is a local file, can be mapped, reports bytes as they
land, answers several ranges a request, ...). A source subclasses `ByteSource` and inherits the
answers of one that has none of them (the defaults below), overriding what it has: no caller
outside `reader/sources/` tests a source's type.
"""

from __future__ import annotations

import itertools
import mmap
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..errors import SourceError
from .spans import COALESCE_GAP, coalesce

# bench/stream_local.py's sweep: 4 MiB streams fastest against a pread loop of the same size
# (bench/README.md); the service sets its own (PT2SERVE_CHUNK_SIZE).
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
# told of archive bytes [at, at + nbytes) and their CRC-32, taken where they were received (stream's)
Checked = Callable[[int, int, int], None]


@dataclass
class BytesAt:
    """Bytes of an object starting at offset `start`, already in memory (a source's tail read at
    open, a directory's runs), so later reads inside them cost nothing."""

    start: int
    data: bytes

    def covers(self, start: int, end: int) -> bool:
        return self.start <= start and end <= self.start + len(self.data)

    def slice(self, start: int, end: int) -> memoryview:
        """A view, not a copy: configs are sliced twice on their way to the JSON parser."""
        return memoryview(self.data)[start - self.start : end - self.start]


class ByteSource(Protocol):
    """Exact byte ranges of one immutable object (a file, a URL, an S3 key).

    `read`, `read_into`, `revalidate` and `close` each source implements (`stream` reads chunk by
    chunk unless the source streams otherwise); the capabilities after them have defaults for a
    source that lacks them (a source subclasses this class to inherit them). A source knows bytes,
    not entries: which entries were checked is kept above it (a cache's, in reader.cache)."""

    location: str
    size: int
    identity: str  # changes whenever the object's bytes may have changed (ETag, mtime+size)
    stats: SourceStats

    async def read(self, start: int, end: int, *, purpose: str = "data") -> bytes:
        """Bytes [start, end), exactly, or raise SourceError / SourceChanged."""
        ...

    async def read_into(
        self, start: int, buffer: memoryview, *, purpose: str = "data", landed: Landed | None = None
    ) -> None:
        """Bytes [start, start + len(buffer)) into `buffer` (writable, format "B"), exactly, or
        raise as `read` does. Local files read straight into it: no bytes object in between.
        Where the source `reports_landed`, `landed(at, nbytes)` hears of archive bytes
        [at, at + nbytes) as they land (so a caller can check what is in while the rest arrives);
        other sources never call it."""
        ...

    async def stream(
        self,
        start: int,
        end: int,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        purpose: str = "data",
        checked: Checked | None = None,
    ) -> AsyncIterator[bytes]:
        """Bytes [start, end) in chunks of at most chunk_size, exactly. `checked(at, nbytes, crc)`
        hears, before the chunk holding them is handed on, of archive bytes whose CRC-32 the source
        took where it received them (HttpSource's receive thread; others never call it), so whoever
        checks the bytes joins those values instead of reading the bytes again. Here: one `read` a
        chunk (the one copy of that loop; a source that streams otherwise overrides it)."""
        check_range(self, start, end)
        for at in range(start, end, chunk_size):
            yield await self.read(at, min(end, at + chunk_size), purpose=purpose)

    async def revalidate(self) -> bool:
        """True if the object is still the one opened (cheaply: a stat, a conditional request)."""
        ...

    async def close(self) -> None: ...

    # -- capabilities: what a source without them answers ---------------------------------------

    # A file on this machine: reads are system calls, not requests (a local archive is mapped,
    # and its entries verified once: `held()` and `check_unchanged()` exist).
    local: bool = False
    # Its bytes can be memory-mapped (`map()`, after `fill` of what will be read): a local file,
    # or a cache's copy of a remote version. Views of the mapping are handed out read-only.
    mappable: bool = False
    # `read_into` calls its `landed` as the bytes arrive (a remote body): checks can overlap the
    # receive. Others fill the buffer and return.
    reports_landed: bool = False
    # `stream` takes `checked` and tells it of CRC-32s taken as the bytes were received (a remote
    # body on a receive thread). Others are never given it, so a source of one's own whose `stream`
    # predates the argument keeps working.
    reports_crcs: bool = False
    # A local copy of a remote version (reader.cache): a read may find that the origin moved on
    # (SourceChanged), and `current()` then names the version the object is now.
    cached: bool = False
    # Whether the origin has said these bytes are current (False: a cached version opened offline
    # or stale-if-error), and, for a stale one, which version and why (reader.cache's `Stale`).
    revalidated: bool = True
    stale: Any = None  # reader.cache.source.Stale (typed loosely: sources never import the cache)

    @property
    def fast_connection(self) -> float | None:
        """Bytes a second at which one connection is fast enough to keep to (no parallel parts);
        None: the source does not choose between one connection and several."""
        return None

    @property
    def part_size(self) -> int:
        """The size of the parts a big read is split into (its preferred request size)."""
        return DEFAULT_CHUNK_SIZE

    @property
    def part_cost(self) -> float | None:
        """Seconds of client CPU one part of a multi-range answer costs (its Range entry, its head
        parsed, its view), where configured: what reading a column block's runs as parts is weighed
        with. None: timed where it matters (`speed.time_link`)."""
        return None

    async def serves_multiple_ranges(self) -> bool:
        """Whether one request can carry several ranges (`read_ranges_into` then does so)."""
        return False

    async def read_ranges_into(
        self,
        ranges: Sequence[tuple[int, int]],
        into: Sequence[memoryview],
        *,
        purpose: str = "data",
        fallback_gap: int = COALESCE_GAP,
    ) -> None:
        """Bytes [start, end) of each of `ranges` (sorted, disjoint), end to end across the buffers of
        `into` (each holds whole ranges: one, or several in a row). Here: the ranges joined where at
        most `fallback_gap` lies between them, one `read_into` each (a source that
        `serves_multiple_ranges` asks for several a request)."""
        check_ranges(self, ranges, into)
        await read_ranges_apart(self, ranges, into, purpose=purpose, gap=fallback_gap)

    async def fill(self, spans: Iterable[tuple[int, int]], *, purpose: str = "data") -> None:
        """Make `spans` readable through `map()` (a cache fetches what it lacks); nothing to do here."""
        return None

    def map(self) -> mmap.mmap:
        """The object's bytes mapped copy-on-write, where the source is `mappable`."""
        raise SourceError(f"{self.location} cannot be memory-mapped")

    async def current(self) -> ByteSource:
        """The source of the version the object is now: this one, unless it was opened from a
        `cached` copy whose version the origin has not confirmed yet."""
        return self

    def pinned(self) -> Mapping[str, Any] | None:
        """What names the version opened, to open it again with one revalidation (a remote
        source's validators); None: nothing to pin (not kept in a cache)."""
        return None


def redact_location(location: str) -> str:
    """A location safe to show in errors and listings: no query string (presigned URLs carry
    credentials there), no fragment, no user info. An hf:// location carries none of them (its
    `name@revision` is a repository and a revision): it is shown whole."""
    if "://" not in location:
        return location
    scheme, rest = location.split("://", 1)
    if scheme.lower() == "hf":
        return location
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


def check_ranges(source: ByteSource, ranges: Sequence[tuple[int, int]], into: Sequence[memoryview]) -> None:
    """`read_ranges_into`'s arguments: ranges inside the object, sorted and disjoint, the buffers
    as long as the ranges."""
    for start, end in ranges:
        check_range(source, start, end)
    if any(low < high for (_, high), (low, _) in itertools.pairwise(ranges)):
        raise ValueError("ranges must be sorted and disjoint")
    if sum(map(len, into)) != sum(end - start for start, end in ranges):
        raise ValueError("the buffers are not as long as the ranges")


async def read_ranges_apart(
    source: ByteSource,
    ranges: Sequence[tuple[int, int]],
    into: Sequence[memoryview],
    *,
    purpose: str,
    gap: int,
) -> None:
    """`read_ranges_into` one request a span: the ranges joined where at most `gap` lies between them,
    a range alone read straight into its place, several into one buffer and copied out."""
    views = per_range(into, ranges)
    first = 0
    for low, high in coalesce(ranges, gap):  # both in order: each span's ranges follow on
        last = first
        while last < len(ranges) and ranges[last][1] <= high:
            last += 1
        inside, first = range(first, last), last
        if len(inside) == 1:  # the range alone: straight into its place
            await source.read_into(low, views[inside[0]], purpose=purpose)
            continue
        held = fresh_buffer(high - low)
        await source.read_into(low, held, purpose=purpose)
        for index in inside:
            start, end = ranges[index]
            views[index][:] = held[start - low : end - low]


def per_range(into: Sequence[memoryview], ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
    """Each range's view of `into`, whose buffers hold the ranges end to end (each whole)."""
    views, buffers = [], iter(into)
    buffer, at = memoryview(b""), 0
    for start, end in ranges:
        while at == len(buffer):
            buffer, at = next(buffers), 0
        if at + end - start > len(buffer):
            raise ValueError(f"range [{start}, {end}) does not fit whole in a buffer")
        views.append(buffer[at : at + end - start])
        at += end - start
    return views
