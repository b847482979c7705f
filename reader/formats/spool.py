"""Tensor bytes a bundle sends twice, kept on local disk between the two.

A safetensors file cannot share bytes between names, so a tied weight (GPT-2's `lm_head.weight`
and `wte.weight`: one payload in the archive) is written twice; read from remote storage twice,
it cost the wire 31% more than the archive (652 MB against 498 MB). A bundle's first copy of such
bytes is written to a temporary file as it goes out, and the second comes from that file: the
storage is read once, and memory stays one chunk (the file lives in the temporary directory:
`/tmp`, a volume in the Dockerfile and an emptyDir in deploy/kubernetes). Each copy's CRC-32 is
taken on the way in and checked on the way out, so a spool that lost or changed bytes fails the
response instead of sending them.

The disk a process spools to is bounded: at most `BUDGET` bytes across all its bodies at once
(reserved when a body starts, released when it ends). Copies that do not fit are read again instead,
as before.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
from collections.abc import AsyncIterator, Hashable, Iterable
from dataclasses import dataclass

from .. import zipfmt
from ..errors import IntegrityError
from .body import Chunk


@dataclass(slots=True)
class _Copy:
    offset: int  # where its bytes start in the file
    length: int = 0
    crc: int = 0
    complete: bool = False


BUDGET = 1 << 30  # bytes spooled at once by this process, all bodies together
_reserved = 0
_reserving = threading.Lock()  # bodies may run on several event loops' threads


class Spool:
    """Copies of the bytes of `sizes`' keys (key -> length), each written once in order, then read
    any number of times; the keys that do not fit in what is left of BUDGET are not wanted."""

    def __init__(self, sizes: Iterable[tuple[Hashable, int]]) -> None:
        global _reserved
        self.wanted: set[Hashable] = set()
        self.reserved = 0
        with _reserving:
            for key, length in sizes:
                if _reserved + length <= BUDGET:
                    _reserved += length
                    self.reserved += length
                    self.wanted.add(key)
        self._copies: dict[Hashable, _Copy] = {}
        self._file: int | None = None
        self._end = 0

    def has(self, key: Hashable) -> bool:
        copy = self._copies.get(key)
        return copy is not None and copy.complete

    async def write(self, key: Hashable, data: Chunk) -> None:
        """The next bytes of `key`'s copy (a key not wanted is ignored)."""
        if key not in self.wanted or not len(data):
            return
        copy = self._copies.get(key)
        if copy is None:
            copy = self._copies[key] = _Copy(self._end)
        if copy.complete or copy.offset + copy.length != self._end:
            raise RuntimeError(f"spooled copies must be written one after another ({key!r})")
        if self._file is None:
            self._file = await asyncio.to_thread(_temporary)
        copy.crc = await asyncio.to_thread(_write_all, self._file, data, self._end, copy.crc)
        copy.length += len(data)
        self._end += len(data)

    def seal(self, key: Hashable) -> None:
        """`key`'s copy is whole: later parts may read it."""
        if key in self._copies:
            self._copies[key].complete = True

    async def read(self, key: Hashable, chunk_size: int) -> AsyncIterator[bytes]:
        copy = self._copies[key]
        assert copy.complete and self._file is not None
        crc = 0
        for at in range(0, copy.length, chunk_size):
            size = min(chunk_size, copy.length - at)
            chunk, crc = await asyncio.to_thread(_read_part, self._file, size, copy.offset + at, crc)
            if len(chunk) != size:
                raise IntegrityError(f"spooled copy of {key!r} is short: {len(chunk)} of {size} bytes")
            if at + size == copy.length and crc != copy.crc:
                raise IntegrityError(f"spooled copy of {key!r} changed on disk")
            yield chunk

    def close(self) -> None:
        global _reserved
        with _reserving:
            _reserved -= self.reserved
            self.reserved = 0
        if self._file is not None:
            os.close(self._file)
            self._file = None


def _temporary() -> int:
    """An unnamed file in the temporary directory (gone when closed, or when the process dies)."""
    with tempfile.TemporaryFile(prefix="pt2serve-spool-") as handle:
        return os.dup(handle.fileno())


def _write_all(fd: int, data: Chunk, offset: int, crc: int) -> int:
    """Write `data` at `offset`; the running CRC-32 `crc` after it (taken here, off the event loop)."""
    view = memoryview(data).cast("B")
    crc = zipfmt.crc32(view, crc)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
    return crc


def _read_part(fd: int, size: int, offset: int, crc: int) -> tuple[bytes, int]:
    """Up to `size` bytes at `offset`, and the running CRC-32 `crc` after them."""
    data = os.pread(fd, size, offset)
    return data, zipfmt.crc32(data, crc)
