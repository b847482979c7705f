"""Local file headers: where an entry's data really starts.

torch pads the *local* extra field so data is 64-byte aligned; the central
directory does not repeat that field, so the local header must be read.
"""

from __future__ import annotations

from ..errors import ArchiveFormatError
from .layouts import FLAG_ENCRYPTED, LOCAL_HEADER, LOCAL_HEADER_SIGNATURE
from .records import ZipEntry


def local_header_prefix(entry: ZipEntry) -> int:
    """Bytes from the header offset needed to check the header and find the data."""
    return LOCAL_HEADER.size + len(entry.raw_name)


def data_offset(entry: ZipEntry, header: bytes | memoryview) -> int:
    """Archive offset of the entry's data, from bytes starting at its local header."""
    if len(header) < LOCAL_HEADER.size:
        raise ArchiveFormatError(f"local header of {entry.name!r} at {entry.header_offset} is truncated")
    signature, _, flags, method, _, _, _, _, _, name_length, extra_length = LOCAL_HEADER.unpack_from(header)
    if signature != LOCAL_HEADER_SIGNATURE:
        raise ArchiveFormatError(f"bad local header signature for {entry.name!r} at {entry.header_offset}")
    if flags & FLAG_ENCRYPTED:
        raise ArchiveFormatError(f"entry {entry.name!r} is encrypted")
    if method != entry.method:
        raise ArchiveFormatError(
            f"local header of {entry.name!r} says method {method}, central directory says {entry.method}"
        )
    name = bytes(header[LOCAL_HEADER.size : LOCAL_HEADER.size + name_length])
    if name != entry.raw_name:
        raise ArchiveFormatError(
            f"local header at {entry.header_offset} names {name!r}, central directory says {entry.name!r}"
        )
    start = entry.header_offset + LOCAL_HEADER.size + name_length + extra_length
    if start + entry.compressed_size > entry.region_end:
        raise ArchiveFormatError(
            f"data of {entry.name!r} [{start}, {start + entry.compressed_size}) overlaps "
            f"the next record at {entry.region_end}"
        )
    return start
