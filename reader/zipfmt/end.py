"""Find the central directory from the archive's tail (EOCD, ZIP64 locator and end record)."""

from __future__ import annotations

from ..errors import ArchiveFormatError
from .records import DirectorySpan, NeedBytes
from .structs import (
    CENTRAL_HEADER,
    END_RECORD,
    END_RECORD_SIGNATURE,
    MAX_COMMENT,
    MAX_DIRECTORY_BYTES,
    MAX_DIRECTORY_ENTRIES,
    SENTINEL_16,
    SENTINEL_32,
    ZIP64_END_RECORD,
    ZIP64_END_RECORD_SIGNATURE,
    ZIP64_LOCATOR,
    ZIP64_LOCATOR_SIGNATURE,
)

# The tail must reach this far back to be sure to contain the end record.
MAX_END_SEARCH = END_RECORD.size + MAX_COMMENT


def locate_directory(tail: bytes, tail_start: int, archive_size: int) -> DirectorySpan | NeedBytes:
    """Find where the central directory is, given the last bytes of the archive.

    `tail` holds archive bytes [tail_start, archive_size). Returns NeedBytes when
    a record the tail does not cover is needed; call again with a longer tail.
    """
    if tail_start < 0 or tail_start + len(tail) != archive_size:
        raise ValueError("tail must end at the archive's end")
    if archive_size < END_RECORD.size:
        raise ArchiveFormatError(f"not a ZIP archive: {archive_size} bytes is too short")
    position = _find_end_record(tail, tail_start, archive_size)
    if position is None:
        search_from = max(0, archive_size - MAX_END_SEARCH)
        if tail_start > search_from:
            return NeedBytes(search_from)
        raise ArchiveFormatError("not a ZIP archive: no end of central directory record found")
    fields = END_RECORD.unpack_from(tail, position - tail_start)
    _, disk, cd_disk, disk_entries, entries, cd_size, cd_offset, _ = fields
    locator_at = position - ZIP64_LOCATOR.size
    if locator_at >= 0:
        if locator_at < tail_start:
            return NeedBytes(locator_at)
        at = locator_at - tail_start
        if tail[at : at + 4] == ZIP64_LOCATOR_SIGNATURE:
            return _locate_zip64(tail, tail_start, locator_at)
    if disk != 0 or cd_disk != 0 or disk_entries != entries:
        raise ArchiveFormatError(f"multi-disk ZIP archives are not supported (end record at {position})")
    if entries == SENTINEL_16 or SENTINEL_32 in (cd_size, cd_offset):
        raise ArchiveFormatError(
            f"end record at {position} defers to ZIP64 values but there is no ZIP64 locator"
        )
    return _checked_span(cd_offset, cd_size, entries, position, zip64=False)


def _find_end_record(tail: bytes, tail_start: int, archive_size: int) -> int | None:
    """Archive position of the end record: the last one whose comment ends the file.

    A signature inside a comment could fool a plain search, so a candidate whose
    comment length does not reach exactly to the end is used only if no exact
    candidate exists (tolerates trailing junk after a lone end record).
    """
    fallback = None
    at = len(tail) - END_RECORD.size
    while at >= 0:
        at = tail.rfind(END_RECORD_SIGNATURE, 0, at + 4)
        if at < 0:
            break
        if at + END_RECORD.size <= len(tail):
            comment_length = int.from_bytes(tail[at + 20 : at + 22], "little")
            record_end = tail_start + at + END_RECORD.size + comment_length
            if record_end == archive_size:
                return tail_start + at
            if fallback is None and record_end < archive_size:
                fallback = tail_start + at
        at -= 1
    return fallback


def _locate_zip64(tail: bytes, tail_start: int, locator_at: int) -> DirectorySpan | NeedBytes:
    _, disk, record_offset, disks = ZIP64_LOCATOR.unpack_from(tail, locator_at - tail_start)
    if disk != 0 or disks > 1:
        raise ArchiveFormatError(f"multi-disk ZIP64 archives are not supported (locator at {locator_at})")
    if record_offset + ZIP64_END_RECORD.size > locator_at:
        raise ArchiveFormatError(
            f"ZIP64 locator at {locator_at} points at {record_offset}, which does not leave room "
            "for the ZIP64 end record before the locator"
        )
    if record_offset < tail_start:
        return NeedBytes(record_offset)
    fields = ZIP64_END_RECORD.unpack_from(tail, record_offset - tail_start)
    signature, record_size, _, _, disk, cd_disk, disk_entries, entries, cd_size, cd_offset = fields
    if signature != ZIP64_END_RECORD_SIGNATURE:
        raise ArchiveFormatError(f"bad ZIP64 end record signature at {record_offset}")
    if record_offset + 12 + record_size > locator_at:
        raise ArchiveFormatError(
            f"ZIP64 end record at {record_offset} claims {record_size} bytes, running into the locator"
        )
    if disk != 0 or cd_disk != 0 or disk_entries != entries:
        raise ArchiveFormatError(f"multi-disk ZIP64 archives are not supported (record at {record_offset})")
    return _checked_span(cd_offset, cd_size, entries, record_offset, zip64=True)


def _checked_span(offset: int, size: int, entries: int, limit: int, *, zip64: bool) -> DirectorySpan:
    """The central directory must end before the end records, hold its claimed entries, and stay
    within MAX_DIRECTORY_ENTRIES and MAX_DIRECTORY_BYTES."""
    if offset + size > limit:
        raise ArchiveFormatError(
            f"central directory [{offset}, {offset + size}) runs past the end records at {limit} "
            "(prefixed or truncated archive)"
        )
    if entries > MAX_DIRECTORY_ENTRIES or size > MAX_DIRECTORY_BYTES:
        raise ArchiveFormatError(
            f"end record claims a central directory of {entries} entries in {size} bytes: over the cap of "
            f"{MAX_DIRECTORY_ENTRIES} entries and {MAX_DIRECTORY_BYTES} bytes (MAX_DIRECTORY_ENTRIES, "
            "MAX_DIRECTORY_BYTES); refusing to read it"
        )
    if entries * CENTRAL_HEADER.size > size:
        raise ArchiveFormatError(
            f"end record claims {entries} entries, which cannot fit a {size}-byte central directory"
        )
    return DirectorySpan(offset=offset, size=size, entries=entries, zip64=zip64)
