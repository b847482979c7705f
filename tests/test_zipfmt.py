"""The sans-IO ZIP parser against archives written by CPython's zipfile and by torch."""

from __future__ import annotations

import os
import struct
import zipfile

import pytest

from reader import ArchiveFormatError, IntegrityError, zipfmt
from reader.zipfmt.structs import MAX_DIRECTORY_BYTES, MAX_DIRECTORY_ENTRIES
from testing.paths import ARCHIVES
from testing.zipbytes import build_zip, content_of, directory_of

pytestmark = pytest.mark.unit

FILES = {
    "root/a.bin": os.urandom(1000),
    "root/ü-utf8.json": b'{"x": 1}' * 50,
    "root/empty": b"",
    "root/zeros": bytes(70_000),
}


def _agrees_with_zipfile(data: bytes, tail_size: int = 1 << 20) -> None:
    import io

    span, entries = directory_of(data, tail_size)
    reference = zipfile.ZipFile(io.BytesIO(data)).infolist()
    assert [e.name for e in entries] == [i.filename for i in reference]
    for entry, info in zip(entries, reference, strict=True):
        assert (entry.crc32, entry.size) == (info.CRC, info.file_size)
        assert entry.compressed_size == info.compress_size
        assert entry.header_offset == info.header_offset
        assert content_of(data, entry) == zipfile.ZipFile(io.BytesIO(data)).read(info)
    assert span.entries == len(reference)


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
@pytest.mark.parametrize("streamed", [False, True], ids=["seekable", "data-descriptors"])
@pytest.mark.parametrize("force_zip64", [False, True], ids=["zip32", "zip64"])
def test_parses_what_zipfile_writes(method: int, streamed: bool, force_zip64: bool) -> None:
    data = build_zip(FILES, method=method, streamed=streamed, force_zip64=force_zip64)
    _agrees_with_zipfile(data)
    assert {e.method for e in directory_of(data)[1]} == {method}
    if streamed:
        assert all(e.flags & 0x08 for e in directory_of(data)[1])


def test_names_without_the_utf8_flag_decode_as_cp437_like_zipfile() -> None:
    data = bytearray(build_zip(FILES))
    for signature, flags_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # local, central
        at = data.find(signature)
        while at != -1:
            data[at + flags_at + 1] &= ~0x08  # bit 11 (EFS, UTF-8 names) lives in the high byte
            at = data.find(signature, at + 1)
    _agrees_with_zipfile(bytes(data))
    names = [entry.name for entry in directory_of(bytes(data))[1]]
    assert "root/ü-utf8.json".encode().decode("cp437") in names and "root/a.bin" in names


def test_duplicate_names_are_refused() -> None:
    import io
    import warnings

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate, and writes it
        for content in (b"first", b"second"):
            archive.writestr("root/twice", content)
    with pytest.raises(ArchiveFormatError, match="duplicate entry name 'root/twice'"):
        directory_of(buffer.getvalue())


def test_comment_holding_a_fake_end_record_is_not_fooled() -> None:
    # CPython's zipfile takes the fake record and lists nothing; the record whose
    # comment ends exactly at the end of the file is the real one.
    fake = b"PK\x05\x06" + bytes(18)
    tricky = build_zip(FILES, comment=b"hello " + fake + b" world")
    _, entries = directory_of(tricky)
    _, plain_entries = directory_of(build_zip(FILES))
    assert entries == plain_entries
    assert [content_of(tricky, e) for e in entries] == list(FILES.values())


@pytest.mark.parametrize("tail_size", [22, 40, 100, 5000])
def test_short_tails_ask_for_exactly_the_missing_bytes(tail_size: int) -> None:
    for force_zip64 in (False, True):
        data = build_zip(FILES, force_zip64=force_zip64, comment=b"c" * 30)
        _agrees_with_zipfile(data, tail_size=tail_size)


def test_torch_archives_have_zip64_end_records_and_aligned_data() -> None:
    data = (ARCHIVES / "layouts.pt2").read_bytes()
    span, entries = directory_of(data)
    assert span.zip64
    for entry in entries:
        assert entry.flags & 0x08 or entry.size == 0  # torch writes data descriptors
        offset = zipfmt.data_offset(entry, data[entry.header_offset : entry.region_end])
        assert offset % 64 == 0  # the FB padding only the local header carries
    _agrees_with_zipfile(data)


def test_central_directory_larger_than_64k() -> None:
    data = (ARCHIVES / "many.pt2").read_bytes()
    span, entries = directory_of(data, tail_size=1 << 16)
    assert span.size > 1 << 16 and len(entries) > 1000


def test_decoder_rejects_wrong_crc_and_size() -> None:
    data = build_zip({"r/x": b"abcdef" * 100}, method=zipfile.ZIP_DEFLATED, streamed=True)
    _, (entry,) = directory_of(data)
    bad_crc = entry._replace(crc32=entry.crc32 ^ 1)
    with pytest.raises(IntegrityError, match="CRC"):
        content_of(data, bad_crc)
    short = entry._replace(size=entry.size - 1)
    with pytest.raises(IntegrityError, match="more than"):
        content_of(data, short)


def test_unsupported_method_is_a_format_error() -> None:
    data = build_zip({"r/x": b"abc" * 100}, method=zipfile.ZIP_BZIP2)
    _, (entry,) = directory_of(data)
    with pytest.raises(ArchiveFormatError, match="method 12"):
        zipfmt.EntryDecoder(entry)


@pytest.mark.parametrize("fixture", ["layouts.pt2", "dtypes.pt2", "many.pt2", "two_models.pt2"])
def test_the_predicted_data_offset_is_where_torch_wrote_the_data(fixture: str) -> None:
    data = (ARCHIVES / fixture).read_bytes()
    _, entries = directory_of(data)
    for entry in entries:
        found = zipfmt.data_offset(entry, data[entry.header_offset : entry.region_end])
        assert zipfmt.predicted_data_offset(entry) == found, entry.name


def test_a_prediction_is_no_more_than_a_prediction_for_other_writers() -> None:
    data = build_zip(FILES)  # CPython's zipfile: no FB field, the data right after the name
    _, entries = directory_of(data)
    for entry in entries:
        found = zipfmt.data_offset(entry, data[entry.header_offset : entry.region_end])
        assert found == entry.header_offset + 30 + len(entry.raw_name)
        assert zipfmt.predicted_data_offset(entry) != found


@pytest.mark.parametrize(
    ("entries", "size"),
    [
        (MAX_DIRECTORY_ENTRIES + 1, (MAX_DIRECTORY_ENTRIES + 1) * 46),
        (10, MAX_DIRECTORY_BYTES + 1),  # few records, with long names and extras
    ],
)
def test_a_directory_over_its_cap_is_refused_before_it_is_read(entries: int, size: int) -> None:
    """Only the tail is at hand: the end records' claims are refused before the directory is fetched."""
    offset = 1000  # the directory [1000, 1000 + size), then the ZIP64 end record, locator, end record
    record_at = offset + size
    zip64_end = struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, entries, entries, size, offset)
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, record_at, 1)
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    tail = zip64_end + locator + end
    with pytest.raises(ArchiveFormatError, match="MAX_DIRECTORY"):
        zipfmt.locate_directory(tail, record_at, record_at + len(tail))


@pytest.mark.parametrize("piece", [1, 7, 30, 1 << 20])
def test_a_local_header_fed_in_pieces_gives_the_data_offset_locate_data_gives(piece: int) -> None:
    data = (ARCHIVES / "layouts.pt2").read_bytes()
    _, entries = directory_of(data)
    for entry in entries:
        parser = zipfmt.LocalHeaderParser(entry)
        at = entry.header_offset
        while parser.data_offset is None:
            taken = parser.feed(memoryview(data)[at : at + piece])
            assert taken > 0
            at += taken
        assert parser.data_offset == zipfmt.locate_data(entry, data[entry.header_offset :]) == at
        assert parser.feed(data[at : at + 10]) == 0  # nothing past the header is taken


def test_a_local_header_fed_in_pieces_is_checked_against_the_directory() -> None:
    data = bytearray(build_zip({"root/a.bin": b"x" * 100}))
    _, entries = directory_of(bytes(data))
    entry = entries[0]
    name_at = entry.header_offset + 30
    data[name_at] ^= 0xFF  # the local header names another entry
    parser = zipfmt.LocalHeaderParser(entry)
    with pytest.raises(ArchiveFormatError, match="names"):
        for at in range(entry.header_offset, len(data)):
            parser.feed(data[at : at + 1])
