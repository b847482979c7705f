"""Receive buffers that carry the CRC-32 of their bytes, taken on the thread that filled them.

A buffer is filled whole by one socket-reading thread (receiver.py), the CRC-32 of each `PIECE` of
it taken there right after, while the bytes are still in that core's cache, then handed on
unchanged. Whoever checks an entry (reading/running_crc.py) joins these values
(`zipfmt.crc32_combine`) instead of reading the bytes again. A view counts when it starts and ends
on pieces' edges (the buffer's end is one): a consumer asking for 1 MiB chunks gets four such views
of a 4 MiB buffer. Any other view, or a buffer cut short, is checked as any other bytes are.
"""

from __future__ import annotations

import numpy as np

from .. import zipfmt

PIECE = 1 << 20


class Received(np.ndarray):
    """A receive buffer; `crcs` (one per PIECE) is set once it is full and checked, never before."""


def fresh(length: int) -> Received:
    """An uninitialised buffer of `length` bytes, without CRC-32s yet."""
    return np.empty(length, dtype=np.uint8).view(Received)


def check(buffer: Received) -> None:
    """Take the CRC-32 of each piece of the full `buffer` (on the thread that filled it)."""
    view = memoryview(buffer)
    buffer.crcs = [zipfmt.crc32(view[at : at + PIECE]) for at in range(0, len(view), PIECE)]


def known_crc(chunk: object) -> int | None:
    """The CRC-32 of `chunk` from its buffer's pieces, if `chunk` is a view of whole pieces."""
    if type(chunk) is not memoryview:
        return None
    owner = chunk.obj
    if type(owner) is not Received or not chunk.c_contiguous:
        return None
    crcs = getattr(owner, "crcs", None)
    if crcs is None:
        return None
    if chunk.nbytes == owner.nbytes:
        start = 0
    else:
        start = np.frombuffer(chunk, dtype=np.uint8).ctypes.data - owner.ctypes.data
    end = start + chunk.nbytes
    if start % PIECE or (end % PIECE and end != owner.nbytes) or not 0 <= start < end <= owner.nbytes:
        return None
    first, last = start // PIECE, -(-end // PIECE)
    value = crcs[first]
    for index in range(first + 1, last):
        value = zipfmt.crc32_combine(value, crcs[index], min(PIECE, owner.nbytes - index * PIECE))
    return value
