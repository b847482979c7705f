"""Local file headers: where an entry's data really starts.

torch pads the *local* extra field so data is 64-byte aligned; the central
directory does not repeat that field, so the local header must be read. A
wrong data offset means wrong bytes, so the header is checked hard: name,
method, an extra field that tiles exactly, and (without data descriptors)
CRC and sizes equal to the central directory's.
"""

from __future__ import annotations

from ..errors import ArchiveFormatError
from .records import NeedUntil, ZipEntry
from .structs import (
    EXTRA_HEADER,
    FLAG_DATA_DESCRIPTOR,
    FLAG_ENCRYPTED,
    LOCAL_HEADER,
    LOCAL_HEADER_SIGNATURE,
    SENTINEL_32,
)

# Enough to cover torch's alignment padding; longer extras cost one more read.
LOCAL_EXTRA_GUESS = 128


def local_header_guess(entry: ZipEntry) -> int:
    """Bytes from the header offset that usually hold the whole local header."""
    return LOCAL_HEADER.size + len(entry.raw_name) + LOCAL_EXTRA_GUESS


def local_header_size(entry: ZipEntry, header: bytes | memoryview) -> int:
    """The whole local header's length, from at least its first 30 bytes."""
    if len(header) < LOCAL_HEADER.size:
        raise ArchiveFormatError(f"local header of {entry.name!r} at {entry.header_offset} is truncated")
    if bytes(header[:4]) != LOCAL_HEADER_SIGNATURE:
        raise ArchiveFormatError(f"bad local header signature for {entry.name!r} at {entry.header_offset}")
    name_length, extra_length = LOCAL_HEADER.unpack_from(header)[9:11]
    return LOCAL_HEADER.size + name_length + extra_length


def locate_data(entry: ZipEntry, window: bytes | memoryview, data_length: int = 0) -> int | NeedUntil:
    """The entry's data offset, from archive bytes that start at its local header, once they hold
    the whole header and `data_length` bytes of data; else how far they must reach."""
    if len(window) < LOCAL_HEADER.size:
        if entry.header_offset + LOCAL_HEADER.size > entry.region_end:
            raise ArchiveFormatError(f"local header of {entry.name!r} at {entry.header_offset} is truncated")
        return NeedUntil(entry.header_offset + local_header_guess(entry) + data_length)
    needed = local_header_size(entry, window) + data_length
    if entry.header_offset + needed > entry.region_end:
        raise ArchiveFormatError(
            f"local header of {entry.name!r} at {entry.header_offset} leaves no room for its data"
        )
    if len(window) < needed:
        return NeedUntil(entry.header_offset + needed)
    return data_offset(entry, window)


def data_offset(entry: ZipEntry, header: bytes | memoryview) -> int:
    """Archive offset of the entry's data, from bytes holding its whole local header."""
    size = local_header_size(entry, header)
    if len(header) < size:
        raise ArchiveFormatError(
            f"local header of {entry.name!r} at {entry.header_offset} needs {size} bytes, got {len(header)}"
        )
    (_, _, flags, method, _, _, crc, compressed, uncompressed, name_length, extra_length) = (
        LOCAL_HEADER.unpack_from(header)
    )
    where = f"local header of {entry.name!r} at {entry.header_offset}"
    if flags & FLAG_ENCRYPTED:
        raise ArchiveFormatError(f"entry {entry.name!r} is encrypted")
    if method != entry.method:
        raise ArchiveFormatError(f"{where} says method {method}, central directory says {entry.method}")
    name = bytes(header[LOCAL_HEADER.size : LOCAL_HEADER.size + name_length])
    if name != entry.raw_name:
        raise ArchiveFormatError(f"{where} names {name!r}, central directory says {entry.raw_name!r}")
    extra_at = LOCAL_HEADER.size + name_length
    _check_extra_tiles(header[extra_at : extra_at + extra_length], where)
    if not flags & FLAG_DATA_DESCRIPTOR:
        _check_matches_directory(entry, crc, compressed, uncompressed, where)
    start = entry.header_offset + size
    if start + entry.compressed_size > entry.region_end:
        raise ArchiveFormatError(
            f"data of {entry.name!r} [{start}, {start + entry.compressed_size}) overlaps "
            f"the next record at {entry.region_end}"
        )
    return start


def _check_extra_tiles(extra: bytes | memoryview, where: str) -> None:
    """Extra records (id, size, data) must fill the extra field exactly."""
    at = 0
    while at < len(extra):
        if at + EXTRA_HEADER.size > len(extra):
            raise ArchiveFormatError(f"{where}: extra field ends inside a record header")
        _, data_size = EXTRA_HEADER.unpack_from(extra, at)
        at += EXTRA_HEADER.size + data_size
    if at != len(extra):
        raise ArchiveFormatError(f"{where}: extra field records overrun its length")


def _check_matches_directory(entry: ZipEntry, crc: int, compressed: int, size: int, where: str) -> None:
    if crc != entry.crc32:
        raise ArchiveFormatError(f"{where}: CRC {crc:08x} differs from the central directory's")
    pairs = ((compressed, entry.compressed_size, "compressed size"), (size, entry.size, "size"))
    for local, central, what in pairs:
        if local != central and local != SENTINEL_32:
            raise ArchiveFormatError(f"{where}: {what} {local}, central directory says {central}")
