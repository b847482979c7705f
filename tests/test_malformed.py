"""Hostile and broken archives: only ReaderError subclasses escape, nothing hangs, no wrong bytes."""

from __future__ import annotations

import asyncio
import struct
import zipfile

import pytest

import reader
import reader.entries.opening
from reader import zipfmt
from reader.sources import BytesSource
from testing.paths import ARCHIVES
from testing.zipbytes import build_zip, directory_of

pytestmark = pytest.mark.unit

ORIGINAL = (ARCHIVES / "two_models.pt2").read_bytes()
TIME_BOUND = 5.0


async def _read_everything(data: bytes) -> dict:
    """Open and read every tensor in both orders; map each to its bytes or its ReaderError type."""
    results: dict = {}
    try:
        async with reader.open_archive(BytesSource(data)) as ar:
            for info in ar.tensors():
                for order in ("default", "contiguous"):
                    key = (info.model, info.name, order)
                    try:
                        results[key] = await ar.read(info.name, model=info.model, order=order)
                    except reader.ReaderError as exc:
                        results[key] = type(exc)
    except reader.ReaderError as exc:
        return {"open": type(exc)}
    return results


def outcome(data: bytes) -> dict:
    return asyncio.run(asyncio.wait_for(_read_everything(data), TIME_BOUND))


GOOD = outcome(ORIGINAL)
SPAN, ENTRIES = directory_of(ORIGINAL)


def _data_offset(entry: zipfmt.ZipEntry) -> int:
    return zipfmt.data_offset(entry, ORIGINAL[entry.header_offset : entry.region_end])


def _regions() -> dict[str, list[int]]:
    """Byte positions of each record type in the original archive."""
    regions: dict[str, list[int]] = {"local header": [], "central record": [], "payload": []}
    for entry in ENTRIES:
        start = _data_offset(entry)
        regions["local header"] += range(entry.header_offset, start)
        if entry.name.split("/")[-1].startswith("weight_"):
            regions["payload"] += range(start, start + entry.compressed_size)
    regions["central record"] = list(range(SPAN.offset, SPAN.end))
    end_record = ORIGINAL.rindex(b"PK\x05\x06")
    regions["end record"] = list(range(end_record, len(ORIGINAL)))
    regions["zip64 locator"] = list(range(end_record - 20, end_record))
    regions["zip64 end record"] = list(range(end_record - 76, end_record - 20))
    return regions


def _flipped(position: int, mask: int) -> bytes:
    data = bytearray(ORIGINAL)
    data[position] ^= mask
    return bytes(data)


def _payload_views(position: int) -> set:
    """Tensors whose bytes come from part of the payload entry holding `position` (unverifiable)."""
    for entry in ENTRIES:
        start = _data_offset(entry)
        if start <= position < start + entry.compressed_size:
            return {entry.name}
    return set()


def test_good_archive_reads_everything() -> None:
    assert "open" not in GOOD and len(GOOD) == 14
    assert all(isinstance(value, bytes) for value in GOOD.values())


@pytest.mark.parametrize("region", ["end record", "zip64 locator", "zip64 end record", "central record",
                                    "local header", "payload"])  # fmt: skip
def test_flipped_bytes_never_give_wrong_bytes(region: str) -> None:
    positions = _regions()[region]
    damaged_reads = 0
    for position in positions:
        for mask in (0x01, 0x80):
            result = outcome(_flipped(position, mask))
            if "open" in result:
                assert issubclass(result["open"], reader.ReaderError)
                continue
            for key, value in result.items():
                if isinstance(value, bytes) and key in GOOD:
                    if value != GOOD[key]:
                        # only a partial view of a damaged payload can differ (its CRC covers the
                        # whole entry); whole-entry reads must have raised IntegrityError instead
                        assert region == "payload", (region, position, key)
                        damaged_reads += 1
                elif not isinstance(value, bytes):
                    assert issubclass(value, reader.ReaderError)
    if region == "payload":
        assert damaged_reads == 0  # two_models.pt2 has no shared payloads: every read is whole-entry


def test_damaged_payload_raises_integrity_error_on_read_and_stream() -> None:
    entry = next(e for e in ENTRIES if e.name.endswith("weight_0"))
    data = _flipped(_data_offset(entry) + 3, 0x10)

    async def check() -> None:
        async with reader.open_archive(BytesSource(data)) as ar:
            info = next(t for t in ar.tensors() if t.storage.entry == entry.name)
            with pytest.raises(reader.IntegrityError, match="CRC"):
                await ar.read(info.name, model=info.model)
            with pytest.raises(reader.IntegrityError):
                async for _ in ar.tensor(info.name, model=info.model).chunks(chunk_size=16):
                    pass
            with pytest.raises(reader.IntegrityError):
                await ar.read_many([t.name for t in ar.tensors(model=info.model)], model=info.model)
            # a range that is not the whole entry cannot be checked, and is served
            part = [c async for c in ar.tensor(info.name, model=info.model).chunks(start=8, end=16)]
            assert len(b"".join(bytes(c) for c in part)) == 8

    asyncio.run(asyncio.wait_for(check(), TIME_BOUND))


def test_truncated_at_many_points() -> None:
    cuts = sorted(set(range(0, len(ORIGINAL), 97)) | set(range(len(ORIGINAL) - 200, len(ORIGINAL))))
    for cut in cuts:
        result = outcome(ORIGINAL[:cut])
        assert "open" in result and issubclass(result["open"], reader.ArchiveFormatError), cut


@pytest.mark.parametrize(
    "data",
    [b"", b"PK", b"not a zip file at all" * 10, bytes(4096), b"PK\x05\x06" + bytes(18)],
    ids=["empty", "two-bytes", "text", "zeros", "empty-zip"],
)
def test_not_an_archive(data: bytes) -> None:
    assert issubclass(outcome(data)["open"], reader.ArchiveFormatError)


def _end_record_at(data: bytes) -> int:
    return data.rindex(b"PK\x05\x06")


def _patched(data: bytes, position: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, position, value)
    return bytes(out)


def test_bogus_counts_sizes_and_offsets() -> None:
    plain = build_zip({"r/archive_format": b"pt2", "r/data": bytes(100)})
    eocd = _end_record_at(plain)
    cases = {
        "entries 0xFFFF without ZIP64": _patched(
            _patched(plain, eocd + 8, "<H", 0xFFFF), eocd + 10, "<H", 0xFFFF
        ),
        "absurd entry count": _patched(_patched(plain, eocd + 8, "<H", 5000), eocd + 10, "<H", 5000),
        "directory offset past the end": _patched(plain, eocd + 16, "<I", len(plain) + 10),
        "directory size past the end": _patched(plain, eocd + 12, "<I", len(plain) * 4),
        "multi-disk": _patched(plain, eocd + 4, "<H", 1),
    }
    central = plain.index(b"PK\x01\x02")
    cases["compressed size overlapping the next entry"] = _patched(plain, central + 20, "<I", 10_000)
    cases["header offset past the directory"] = _patched(plain, central + 42, "<I", len(plain) - 30)
    cases["name length past the directory"] = _patched(plain, central + 28, "<H", 60_000)
    second = plain.index(b"PK\x01\x02", central + 1)
    cases["two records sharing one local header"] = _patched(plain, second + 42, "<I", 0)
    for what, data in cases.items():
        result = outcome(data)
        assert "open" in result and issubclass(result["open"], reader.ArchiveFormatError), what


def test_zip_bomb_claims_are_refused_before_inflating() -> None:
    data = build_zip({"r/archive_format": b"pt2", "r/bomb": bytes(1 << 20)}, method=zipfile.ZIP_DEFLATED)
    _, entries = directory_of(data)
    bomb = next(e for e in entries if e.name == "r/bomb")
    # the bomb's central record (the second one) claims ~4 GiB from ~1 KiB of deflate
    record = data.index(b"PK\x01\x02", data.index(b"PK\x01\x02") + 1)
    assert data[record + 46 : record + 46 + len(bomb.raw_name)] == bomb.raw_name
    lying = _patched(data, record + 24, "<I", 0xFFFF_FFFE)
    with pytest.raises(reader.ArchiveFormatError, match="impossible ratio"):
        directory_of(lying)
    assert issubclass(outcome(lying)["open"], reader.ArchiveFormatError)


def test_huge_config_claim_is_refused(monkeypatch) -> None:
    config = b'{"config": {}}' + b" " * (1 << 20)
    archive = build_zip(
        {
            "r/archive_format": b"pt2",
            "r/models/model.json": b"{}",
            "r/data/weights/model_weights_config.json": config,
        },
        method=zipfile.ZIP_DEFLATED,
    )
    assert outcome(archive) == {}  # a 1 MiB config of spaces is fine
    monkeypatch.setattr(reader.entries.budget, "MAX_METADATA_BYTES", 1000)  # the real cap is 256 MiB
    assert issubclass(outcome(archive)["open"], reader.ArchiveFormatError)


def test_malformed_configs() -> None:
    def with_config(text: bytes) -> bytes:
        return build_zip({
            "r/archive_format": b"pt2",
            "r/models/model.json": b"{}",
            "r/data/weights/model_weights_config.json": text,
            "r/data/weights/weight_0": bytes(16),
        })  # fmt: skip

    meta = (b'{"config": {"w": {"path_name": "weight_0", "is_param": true, "use_pickle": false, '
            b'"tensor_meta": {"dtype": %d, "sizes": [{"as_int": %d}], "requires_grad": false, '
            b'"device": {"type": "cpu"}, "strides": [{"as_int": %d}], "storage_offset": {"as_int": %d}, '
            b'"layout": 7}}}}')  # fmt: skip
    assert outcome(with_config(meta % (7, 4, 1, 0)))[("model", "w", "default")] == bytes(16)
    for bad in [
        b"not json",
        b"[]",
        b'{"config": []}',
        meta % (0, 4, 1, 0),  # UNKNOWN dtype
        meta % (99, 4, 1, 0),  # no such dtype
        meta % (7, 5, 1, 0),  # one element past the payload
        meta % (7, 2, 1, 3),  # offset pushes it past the payload
        meta % (7, 3, 2, 0),  # strides reach past the payload
        meta.replace(b"weight_0", b"weight_9") % (7, 4, 1, 0),  # missing payload
        meta.replace(b'"is_param": true', b'"is_param": "yes"') % (7, 4, 1, 0),
        (meta % (7, 4, 1, 0)).replace(b'{"as_int": 4}', b'{"as_int": -4}'),  # negative size
        (meta % (7, 4, 1, 0)).replace(b'"storage_offset": {"as_int": 0}', b'"storage_offset": 0'),
        (meta % (7, 4, 1, 0)).replace(b'{"as_int": 4}', b'{"as_int": true}'),  # a bool is not a size
        (meta % (7, 4, 1, 0)).replace(b'{"as_int": 4}', b'{"as_int": 4.0}'),  # nor is a float
        (meta % (7, 4, 1, 0)).replace(b'{"as_int": 4}', b"{}"),  # neither as_int nor as_expr
        (meta % (7, 4, 1, 0)).replace(
            b'"layout": 7', b'"layout": 7, "deep": ' + b"[" * 100_000 + b"]" * 100_000
        ),
    ]:
        result = outcome(with_config(bad))
        assert "open" in result and issubclass(result["open"], reader.ArchiveFormatError), bad
