"""Inflating in bounded pieces hands out every byte: a piece that fills INFLATE_PIECE exactly with the
input used up can leave output inside the inflater, which is asked for again (it was dropped, and a
64 MiB program of zeros ended 114 bytes short)."""

from __future__ import annotations

import zlib

import pytest

from reader import zipfmt
from reader.zipfmt.decode import INFLATE_PIECE, EntryDecoder

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("size", [INFLATE_PIECE, 16 * INFLATE_PIECE + 114, 3 * INFLATE_PIECE - 1])
@pytest.mark.parametrize("fed", [1 << 10, 1 << 30])
def test_every_byte_comes_out(size: int, fed: int) -> None:
    content = b"0," * (size // 2) + b"0" * (size % 2)
    compressor = zlib.compressobj(1, zlib.DEFLATED, -15)
    stored = compressor.compress(content) + compressor.flush()
    entry = zipfmt.ZipEntry(
        "r/models/model.json", b"r/models/model.json", 0, zipfmt.structs.METHOD_DEFLATED,
        zlib.crc32(content), len(stored), size, 0, len(stored) + 100, "deflate",
    )  # fmt: skip
    decoder = EntryDecoder(entry)
    out = bytearray()
    for at in range(0, len(stored), fed):
        for piece in decoder.feed(stored[at : at + fed]):
            out += piece
    decoder.finish()
    assert bytes(out) == content
