"""The contract a fuzz case is checked against (see fuzz/README.md): for any bytes, opening and reading
every tensor every way succeeds or raises a reader.ReaderError; zipfmt raises only its own errors;
untouched tensors read back exactly."""

from __future__ import annotations

import reader
from fuzz.bases import base_map
from fuzz.choices import Choices, chance
from fuzz.mutators import Case
from fuzz.targets import ContractViolation, exercise, run_bounded
from reader import zipfmt


def check_case(case: Case) -> dict:
    """Run a case through the reader and every oracle; return the outcome."""
    outcome = run_bounded(exercise(case.data))
    if case.base is not None and case.touched is not None:
        base = base_map(case.base)
        touched_entries = {
            name for name, ranges in base.entry_ranges.items()
            if any(start <= at < end for start, end in ranges for at in case.touched)
        }  # fmt: skip
        for key, value in outcome.items():
            if not (isinstance(key, tuple) and len(key) == 3 and key[0] != "entry"):
                continue
            model, name, _ = key
            good = base.good.get(key)
            if not isinstance(value, bytes) or not isinstance(good, bytes):
                continue
            if base.depends.get((model, name), set()) & touched_entries:
                continue
            if value != good:
                raise ContractViolation(
                    f"{case.what}: {key} read {len(value)} bytes that differ from the original's "
                    f"{len(good)}, but its payload, configs and headers are untouched"
                )
    for (name, order), options in case.expected.items():
        value = outcome.get(("model", name, order))
        if isinstance(value, bytes) and value not in options:
            raise ContractViolation(f"{case.what}: {name!r} ({order}) read wrong bytes: {value.hex()[:80]}")
    return outcome


def exercise_zipfmt(data: bytes, ch: Choices | None = None) -> None:
    """The sans-IO parser directly, called as documented; only its own two errors may escape."""
    size = len(data)
    span = None
    for tail in (22, 300, 4096, 1 << 20):
        start = max(0, size - tail)
        try:
            for _ in range(6):
                found = zipfmt.locate_directory(data[start:], start, size)
                if isinstance(found, zipfmt.DirectorySpan):
                    span = found
                    break
                if not 0 <= found.start < start:
                    raise ContractViolation(f"locate_directory asked for {found.start} holding [{start}, ..)")
                start = found.start
            else:
                raise ContractViolation("locate_directory kept asking for more bytes")
        except reader.ArchiveFormatError:
            span = None
    if span is None:
        return
    if not 0 <= span.offset <= span.end <= size:
        raise ContractViolation(f"directory span {span} lies outside the {size}-byte archive")
    try:
        entries = zipfmt.parse_central_directory(memoryview(data)[span.offset : span.end], span)
    except reader.ArchiveFormatError:
        return
    for entry in entries:
        if not entry.header_offset + 30 + len(entry.raw_name) + entry.compressed_size <= entry.region_end:
            raise ContractViolation(f"entry {entry} overruns its region")
        if entry.region_end > span.offset:
            raise ContractViolation(f"entry {entry} reaches into the central directory")
        header = data[entry.header_offset : entry.region_end]
        try:
            zipfmt.local_header_size(entry, header[: ch.integer(0, 40)] if ch else header)
            offset = zipfmt.data_offset(entry, header)
        except reader.ArchiveFormatError:
            continue
        if offset + entry.compressed_size > entry.region_end:
            raise ContractViolation(f"data of {entry.name!r} overruns its region")
        try:
            decoder = zipfmt.EntryDecoder(entry, verify=ch is None or chance(ch, 2))
            stored = memoryview(data)[offset : offset + entry.compressed_size]
            position = 0
            while position < len(stored):
                step = ch.integer(1, 4096) if ch else 1 << 16
                for _ in decoder.feed(stored[position : position + step]):
                    pass
                position += step
            decoder.finish()
        except (reader.ArchiveFormatError, reader.IntegrityError):
            continue
