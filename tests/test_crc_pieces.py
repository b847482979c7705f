"""CRC-32s of pieces joined, and a RunningCrc that joins the pieces it is told of and checks the rest
itself (the receive thread: test_receiver.py)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reader
from reader import zipfmt
from reader.entries.running_crc import RunningCrc
from reader.sources.transport.http1.connection import THREAD_MIN
from reader.sources.transport.http1.receiver import PIECE
from reader.zipfmt import ZipEntry, combine

SIZE = 2 * THREAD_MIN + 12345
DATA = np.random.default_rng(7).integers(0, 256, SIZE, dtype=np.uint8).tobytes()

pytestmark = pytest.mark.unit


@given(st.binary(max_size=3000), st.binary(max_size=3000), st.integers(0, 1 << 40))
@settings(max_examples=300, deadline=None)
def test_joining_crcs_equals_the_crc_of_the_joined_bytes(first: bytes, second: bytes, zeros: int) -> None:
    joined = zlib.crc32(first + second)
    assert combine.crc32_combine(zlib.crc32(first), zlib.crc32(second), len(second)) == joined
    assert zipfmt.crc32_combine(zlib.crc32(first), zlib.crc32(second), len(second)) == joined
    # long lengths (zero bytes appended) agree with the library's own combination where there is one
    crc = zlib.crc32(first)
    assert combine.crc32_combine(crc, 0, zeros) == zipfmt.crc32_combine(crc, 0, zeros)


def _entry(data: bytes) -> ZipEntry:
    return ZipEntry("e", b"e", 0, 0, zlib.crc32(data), len(data), len(data), 0, 0, "stored")


async def test_running_crc_joins_pieces_told_of_and_checks_the_rest_itself() -> None:
    """Pieces told of that tile a chunk exactly are joined, not read again (a wrong one told makes
    the check fail: the value was used); a chunk they do not tile is checked from its bytes."""
    data = DATA[: 3 * PIECE + 1000]
    for told_wrong in (False, True):
        running = RunningCrc(_entry(data), at=10)
        for low in range(0, len(data), PIECE):
            piece = data[low : low + PIECE]
            running.checked(10 + low, len(piece), zlib.crc32(piece) ^ (told_wrong and low == PIECE))
        running.add(data[:PIECE])  # one piece
        running.add(data[PIECE : 3 * PIECE])  # two pieces joined
        running.add(data[3 * PIECE :])
        if told_wrong:
            with pytest.raises(reader.IntegrityError):
                await running.verify()
        else:
            await running.verify()
    running = RunningCrc(_entry(data), at=0)  # pieces that do not tile the chunks: checked from bytes
    running.checked(0, PIECE, 0)  # wrong, but never used: no chunk is exactly [0, PIECE)
    running.add(data[: PIECE + 1])
    running.add(data[PIECE + 1 :])
    await running.verify()
