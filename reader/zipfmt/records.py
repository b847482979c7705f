"""Small frozen records the ZIP parser returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .structs import METHOD_NAMES


@dataclass(frozen=True, slots=True)
class NeedBytes:
    """The parser needs the archive's bytes from `start` on (up to the old tail)."""

    start: int


@dataclass(frozen=True, slots=True)
class NeedUntil:
    """The parser needs the archive's bytes up to `end` (a local header longer than guessed)."""

    end: int


@dataclass(frozen=True, slots=True)
class DirectorySpan:
    """Where the central directory lies, as the end records claim (checked)."""

    offset: int
    size: int
    entries: int
    zip64: bool

    @property
    def end(self) -> int:
        return self.offset + self.size


class ZipEntry(NamedTuple):
    """One central directory record, with sizes and offsets resolved (ZIP64 too).

    `region_end` is where the next entry's local header (or the central
    directory) starts: the entry's header, data and descriptor must end before it.
    A NamedTuple rather than a dataclass: archives hold thousands, and building
    one is several times cheaper.
    """

    name: str
    raw_name: bytes
    flags: int
    method: int
    crc32: int
    compressed_size: int
    size: int
    header_offset: int
    region_end: int
    compression: str  # "stored", "deflate" or "method-N": what StorageRef and errors show


def compression_name(method: int) -> str:
    return METHOD_NAMES.get(method) or f"method-{method}"
