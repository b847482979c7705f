"""The CRC-32 and inflate rule (reader/zipfmt/decode.py) in this process: ISA-L where its wheel is
installed, with results identical to the standard zlib's on random data and on every fixture entry.
The reader forced onto the fallback (a subprocess) is in test_crc.py."""

from __future__ import annotations

import zipfile
import zlib

import numpy as np
import pytest

from reader import zipfmt
from reader.zipfmt import decode
from testing.paths import ARCHIVES, ZIP_FIXTURES
from testing.zipbytes import directory_of

pytestmark = pytest.mark.unit


isal_zlib = pytest.importorskip("isal.isal_zlib")


def test_the_fast_crc_equals_zlib_on_random_data_chained_in_any_pieces() -> None:
    rng = np.random.default_rng(34)
    for size in (0, 1, 7, 63, 64, 4099, (1 << 20) + 5, 9 << 20):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert isal_zlib.crc32(data) == zlib.crc32(data), size
        for start in (0, 1, 0xFFFFFFFF, 0x12345678):
            assert isal_zlib.crc32(data, start) == zlib.crc32(data, start), (size, start)
        cuts = sorted(rng.integers(0, size + 1, 5).tolist()) if size else []
        fast = stock = 0
        for low, high in zip([0, *cuts], [*cuts, size], strict=True):
            fast = isal_zlib.crc32(memoryview(data)[low:high], fast)
            stock = zlib.crc32(data[low:high], stock)
        assert fast == stock == zlib.crc32(data), size


def test_the_rule_uses_isal_here_and_agrees_with_every_fixture_entrys_directory_crc() -> None:
    assert decode.LIBRARY == "isal" and zipfmt.crc32 is isal_zlib.crc32
    assert len(ZIP_FIXTURES) >= 9
    entries = 0
    for path in ZIP_FIXTURES:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                content = archive.read(info)  # zipfile checks its CRC with the standard zlib
                assert zipfmt.crc32(content) == zlib.crc32(content) == info.CRC, (path.name, info.filename)
                entries += 1
    assert entries > 50


def test_the_fast_inflater_gives_zlibs_content_for_every_deflate_entry() -> None:
    """many_deflate.pt2 through EntryDecoder (ISA-L, in bounded pieces, fed in odd-sized chunks)
    equals what zipfile's stock-zlib inflate gives."""
    path = ARCHIVES / "many_deflate.pt2"
    raw = path.read_bytes()
    deflated = 0
    with zipfile.ZipFile(path) as archive:
        directory = {entry.name: entry for entry in directory_of(raw)[1]}
        for info in archive.infolist():
            entry = directory[info.filename]
            if info.compress_type != zipfile.ZIP_DEFLATED:
                continue
            start = zipfmt.locate_data(entry, memoryview(raw)[entry.header_offset : entry.region_end])
            stored = memoryview(raw)[start : start + entry.compressed_size]
            decoder = zipfmt.EntryDecoder(entry)
            out = bytearray()
            for at in range(0, len(stored), 7777):
                for piece in decoder.feed(stored[at : at + 7777]):
                    out += piece
            decoder.finish()
            assert bytes(out) == archive.read(info), info.filename
            deflated += 1
    assert deflated > 5
