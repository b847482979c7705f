"""Local file headers: where an entry's data really starts (from a window of bytes, or from bytes
fed as they stream past: LocalHeaderParser).

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
# What torch's writer aligns each entry's data to (its FB extra field pads the local header).
TORCH_ALIGNMENT = 64


def local_header_guess(entry: ZipEntry) -> int:
    """Bytes from the header offset that usually hold the whole local header."""
    return LOCAL_HEADER.size + len(entry.raw_name) + LOCAL_EXTRA_GUESS


def predicted_data_offset(entry: ZipEntry) -> int:
    """Where torch's writer puts the entry's data: after the fixed header, the name, the FB extra
    record's own 4 bytes and a ZIP64 record (when the size or the header offset needs one), rounded up
    to TORCH_ALIGNMENT. A prediction, for reading the data before its local header has come in: only
    the header (`locate_data`) says where the data is; other writers put it elsewhere."""
    start = entry.header_offset + LOCAL_HEADER.size + len(entry.raw_name) + EXTRA_HEADER.size
    if entry.size >= SENTINEL_32 or entry.header_offset >= SENTINEL_32:
        start += EXTRA_HEADER.size
        start += 16 if entry.size >= SENTINEL_32 else 0  # both sizes
        start += 8 if entry.header_offset >= SENTINEL_32 else 0
    return -(-start // TORCH_ALIGNMENT) * TORCH_ALIGNMENT


def local_header_size(entry: ZipEntry, header: bytes | memoryview) -> int:
    """The whole local header's length, from at least its first 30 bytes."""
    fields = _fields(entry, header)
    return LOCAL_HEADER.size + fields[9] + fields[10]


class LocalHeaderParser:
    """One entry's local header from archive bytes fed in pieces of any size, from its first byte
    (a stream that walks a range's entries: reader/formats/demux.py). `feed` takes only the header's
    bytes and says how many it took; `data_offset` is set, every field checked as `data_offset()`
    checks them, once the whole header is in."""

    def __init__(self, entry: ZipEntry) -> None:
        self.entry = entry
        self.data_offset: int | None = None
        self._header = bytearray()

    @property
    def taken(self) -> int:
        """Header bytes fed so far."""
        return len(self._header)

    def feed(self, view: bytes | memoryview) -> int:
        """Take the header's next bytes from the start of `view`; how many were taken."""
        header = self._header
        need = LOCAL_HEADER.size
        if len(header) >= LOCAL_HEADER.size:
            need = local_header_size(self.entry, header)
        take = min(len(view), need - len(header))
        header += view[:take]
        if len(header) >= LOCAL_HEADER.size and len(header) == local_header_size(self.entry, header):
            self.data_offset = data_offset(self.entry, header)
        return take


def _fields(entry: ZipEntry, header: bytes | memoryview) -> tuple:
    """The fixed part of the local header, its signature checked (parsed once per lookup: a whole
    model's load locates every entry)."""
    if len(header) < LOCAL_HEADER.size:
        raise ArchiveFormatError(f"{_where(entry)} is truncated")
    fields = LOCAL_HEADER.unpack_from(header)
    if fields[0] != LOCAL_HEADER_SIGNATURE:
        raise ArchiveFormatError(f"bad local header signature for {entry.name!r} at {entry.header_offset}")
    return fields


def locate_data(entry: ZipEntry, window: bytes | memoryview, data_length: int = 0) -> int | NeedUntil:
    """The entry's data offset, from archive bytes that start at its local header, once they hold
    the whole header and `data_length` bytes of data; else how far they must reach."""
    if len(window) < LOCAL_HEADER.size:
        if entry.header_offset + LOCAL_HEADER.size > entry.region_end:
            raise ArchiveFormatError(f"{_where(entry)} is truncated")
        return NeedUntil(entry.header_offset + local_header_guess(entry) + data_length)
    fields = _fields(entry, window)
    needed = LOCAL_HEADER.size + fields[9] + fields[10] + data_length
    if entry.header_offset + needed > entry.region_end:
        raise ArchiveFormatError(f"{_where(entry)} leaves no room for its data")
    if len(window) < needed:
        return NeedUntil(entry.header_offset + needed)
    return _data_start(entry, window, fields)


def data_offset(entry: ZipEntry, header: bytes | memoryview) -> int:
    """Archive offset of the entry's data, from bytes holding its whole local header."""
    return _data_start(entry, header, _fields(entry, header))


def _data_start(entry: ZipEntry, header: bytes | memoryview, fields: tuple) -> int:
    """The data offset from a parsed header, every field checked against the central directory."""
    (_, _, flags, method, _, _, crc, compressed, uncompressed, name_length, extra_length) = fields
    size = LOCAL_HEADER.size + name_length + extra_length
    if len(header) < size:
        raise ArchiveFormatError(f"{_where(entry)} needs {size} bytes, got {len(header)}")
    if flags & FLAG_ENCRYPTED:
        raise ArchiveFormatError(f"entry {entry.name!r} is encrypted")
    if method != entry.method:
        raise ArchiveFormatError(
            f"{_where(entry)} says method {method}, central directory says {entry.method}"
        )
    name = bytes(header[LOCAL_HEADER.size : LOCAL_HEADER.size + name_length])
    if name != entry.raw_name:
        raise ArchiveFormatError(f"{_where(entry)} names {name!r}, central directory says {entry.raw_name!r}")
    if extra_length:
        extra_at = LOCAL_HEADER.size + name_length
        _check_extra_tiles(entry, header[extra_at : extra_at + extra_length])
    if not flags & FLAG_DATA_DESCRIPTOR:
        _check_matches_directory(entry, crc, compressed, uncompressed)
    start = entry.header_offset + size
    if start + entry.compressed_size > entry.region_end:
        raise ArchiveFormatError(
            f"data of {entry.name!r} [{start}, {start + entry.compressed_size}) overlaps "
            f"the next record at {entry.region_end}"
        )
    return start


def _where(entry: ZipEntry) -> str:
    """How errors name a local header (formatted only when something is wrong)."""
    return f"local header of {entry.name!r} at {entry.header_offset}"


def _check_extra_tiles(entry: ZipEntry, extra: bytes | memoryview) -> None:
    """Extra records (id, size, data) must fill the extra field exactly."""
    at = 0
    length = len(extra)
    while at < length:
        if at + EXTRA_HEADER.size > length:
            raise ArchiveFormatError(f"{_where(entry)}: extra field ends inside a record header")
        _, data_size = EXTRA_HEADER.unpack_from(extra, at)
        at += EXTRA_HEADER.size + data_size
    if at != length:
        raise ArchiveFormatError(f"{_where(entry)}: extra field records overrun its length")


def _check_matches_directory(entry: ZipEntry, crc: int, compressed: int, size: int) -> None:
    if crc != entry.crc32:
        raise ArchiveFormatError(f"{_where(entry)}: CRC {crc:08x} differs from the central directory's")
    pairs = ((compressed, entry.compressed_size, "compressed size"), (size, entry.size, "size"))
    for local, central, what in pairs:
        if local != central and local != SENTINEL_32:
            raise ArchiveFormatError(f"{_where(entry)}: {what} {local}, central directory says {central}")
