"""Parse the central directory into checked ZipEntry records."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ArchiveFormatError
from .records import DirectorySpan, ZipEntry, compression_name
from .structs import (
    CENTRAL_HEADER,
    CENTRAL_HEADER_SIGNATURE,
    EXTRA_HEADER,
    FLAG_UTF8,
    LOCAL_HEADER,
    MAX_DEFLATE_RATIO,
    METHOD_DEFLATED,
    METHOD_STORED,
    SENTINEL_16,
    SENTINEL_32,
    ZIP64_EXTRA_ID,
    ZIP64_FIELD,
)


def parse_central_directory(directory: bytes | memoryview, span: DirectorySpan) -> tuple[ZipEntry, ...]:
    """Parse exactly `span.entries` records from the central directory bytes.

    Every size and offset is checked against the archive layout: entries must lie
    before the central directory, must not overlap, and names must be unique.
    One loop, no call per record: an archive holds thousands of them.
    """
    data = bytes(directory)
    if len(data) != span.size:
        raise ValueError(f"expected {span.size} central directory bytes, got {len(data)}")
    unpack_header = CENTRAL_HEADER.unpack_from
    header_size = CENTRAL_HEADER.size
    raw: list[tuple[bytes, int, int, int, int, int, int]] = []
    at = 0
    for index in range(span.entries):
        if at + header_size > span.size:
            raise ArchiveFormatError(f"central directory record {index} at {span.offset + at} is truncated")
        (
            signature, _, _, flags, method, _, _, crc, compressed, size,
            name_length, extra_length, comment_length, disk, _, _, header_offset,
        ) = unpack_header(data, at)  # fmt: skip
        if signature != CENTRAL_HEADER_SIGNATURE:
            raise ArchiveFormatError(
                f"bad central directory signature for record {index} at {span.offset + at}"
            )
        name_at = at + header_size
        extra_at = name_at + name_length
        record_end = extra_at + extra_length + comment_length
        if record_end > span.size:
            raise ArchiveFormatError(
                f"central directory record {index} at {span.offset + at} runs past the directory's end"
            )
        raw_name = data[name_at:extra_at]
        if SENTINEL_32 in (compressed, size, header_offset) or disk == SENTINEL_16:
            size, compressed, header_offset = _zip64_values(
                memoryview(data)[extra_at : extra_at + extra_length],
                size,
                compressed,
                header_offset,
                disk,
                span.offset + at,
            )
        elif disk != 0:
            raise ArchiveFormatError(f"entry {raw_name!r} at {span.offset + at} starts on disk {disk}")
        raw.append((raw_name, flags, method, crc, compressed, size, header_offset))
        at = record_end
    if at != span.size:
        raise ArchiveFormatError(
            f"central directory at {span.offset} holds {span.size - at} bytes beyond its "
            f"{span.entries} entries"
        )
    return _with_regions(raw, span)


def _zip64_values(
    extra: memoryview, size: int, compressed: int, header_offset: int, disk: int, position: int
) -> tuple[int, int, int]:
    """Replace 0xFFFFFFFF fields with the ZIP64 extra field's values, in APPNOTE order."""
    wanted = [name for name, value in (("size", size), ("compressed", compressed),
                                       ("offset", header_offset)) if value == SENTINEL_32]  # fmt: skip
    at = 0
    while at + EXTRA_HEADER.size <= len(extra):
        header_id, data_size = EXTRA_HEADER.unpack_from(extra, at)
        data_at = at + EXTRA_HEADER.size
        if data_at + data_size > len(extra):
            break
        if header_id == ZIP64_EXTRA_ID:
            if data_size < ZIP64_FIELD.size * len(wanted):
                raise ArchiveFormatError(
                    f"ZIP64 extra field of record at {position} is {data_size} bytes, "
                    f"too short for {', '.join(wanted)}"
                )
            values = {
                name: ZIP64_FIELD.unpack_from(extra, data_at + i * ZIP64_FIELD.size)[0]
                for i, name in enumerate(wanted)
            }
            if disk == SENTINEL_16 and data_size >= ZIP64_FIELD.size * len(wanted) + 4:
                disk = int.from_bytes(
                    extra[data_at + 8 * len(wanted) : data_at + 8 * len(wanted) + 4], "little"
                )
            if disk not in (0, SENTINEL_16):
                raise ArchiveFormatError(f"record at {position} starts on disk {disk}")
            return (
                values.get("size", size),
                values.get("compressed", compressed),
                values.get("offset", header_offset),
            )
        at = data_at + data_size
    raise ArchiveFormatError(
        f"record at {position} defers {', '.join(wanted) or 'its disk'} to a ZIP64 extra field it lacks"
    )


def _with_regions(raw: list[tuple], span: DirectorySpan) -> tuple[ZipEntry, ...]:
    """Check entries against each other and the directory; give each its region end."""
    offsets = sorted({record[6] for record in raw})
    if len(offsets) != len(raw):  # two records claim one local header: their entries overlap
        first, second = _first_clash(raw, lambda record: record[6])
        raise ArchiveFormatError(f"entries {first[0]!r} and {second[0]!r} both start at {first[6]}")
    next_start = dict(zip(offsets, [*offsets[1:], span.offset]))
    entries = []
    local_header_size = LOCAL_HEADER.size
    make_entry = ZipEntry._make
    for raw_name, flags, method, crc, compressed, size, header_offset in raw:
        if raw_name.isascii():  # the usual case, and the same in both encodings (cp437 is slow)
            name = raw_name.decode("ascii")
        else:
            name = raw_name.decode("utf-8" if flags & FLAG_UTF8 else "cp437", errors="replace")
        region_end = next_start[header_offset]
        if header_offset + local_header_size + len(raw_name) + compressed > region_end:
            what = "the central directory" if region_end == span.offset else "the next entry"
            raise ArchiveFormatError(
                f"entry {name!r} at {header_offset} ({compressed} bytes) overlaps {what} at {region_end}"
            )
        if method == METHOD_STORED and compressed != size:
            raise ArchiveFormatError(f"stored entry {name!r} claims {size} bytes but holds {compressed}")
        if method == METHOD_DEFLATED and size > compressed * MAX_DEFLATE_RATIO + 64:
            raise ArchiveFormatError(
                f"deflated entry {name!r} claims {size} bytes from {compressed}: impossible ratio"
            )
        entries.append(make_entry((
            name, raw_name, flags, method, crc, compressed, size, header_offset, region_end,
            compression_name(method),
        )))  # fmt: skip
    if len({entry.name for entry in entries}) != len(entries):
        _, second = _first_clash(entries, lambda entry: entry.name)
        raise ArchiveFormatError(f"duplicate entry name {second.name!r}")
    return tuple(entries)


def _first_clash(items: list, key: Callable[[Any], object]) -> tuple[Any, Any]:
    """The first two items with the same key (the caller knows there are some)."""
    seen: dict[object, Any] = {}
    for item in items:
        earlier = seen.setdefault(key(item), item)
        if earlier is not item:
            return earlier, item
    raise AssertionError("no two items share a key")
