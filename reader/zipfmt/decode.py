"""Turn an entry's stored bytes into its content, checking size and CRC-32.

ISA-L (`isal`) does the CRC-32 and the inflating where its wheel is installed: the same values
as zlib, its CRC-32 several times the standard library's and faster than zlib-ng's (bench/crc.py,
bench/README.md), its inflate as fast as zlib-ng's or faster. So verifying a whole entry costs
little next to receiving it. Without the wheel (or with PT2SERVE_STOCK_ZLIB=1) the standard
library's zlib does both, with identical results (tests/test_crc.py).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator

from ..errors import ArchiveFormatError, IntegrityError
from . import combine
from .records import ZipEntry
from .structs import FLAG_ENCRYPTED, METHOD_DEFLATED, METHOD_STORED

# Inflate in bounded pieces so a small compressed chunk can never become a huge buffer.
INFLATE_PIECE = 4 << 20

try:
    from isal import isal_zlib as _fast
except ImportError:  # the wheel is missing on this platform: the standard library's zlib
    _fast = None
_library = zlib if _fast is None or os.environ.get("PT2SERVE_STOCK_ZLIB") == "1" else _fast
LIBRARY = "isal" if _library is _fast else "zlib"  # which one this process uses

crc32 = _library.crc32  # crc32(data, value=0): the running CRC-32 of `data` after `value`
# crc32_combine(crc32(a), crc32(b), len(b)) == crc32(a + b): ISA-L's, or zlib's algorithm in Python
crc32_combine = getattr(_library, "crc32_combine", None) or combine.crc32_combine


def verify_crc(entry: ZipEntry, crc: int) -> None:
    """Raise IntegrityError unless `crc` (of the entry's whole content) is the directory's CRC-32."""
    if crc != entry.crc32:
        raise IntegrityError(f"entry {entry.name!r}: CRC-32 {crc:08x} does not match {entry.crc32:08x}")


def check_decodable(entry: ZipEntry) -> None:
    """Raise ArchiveFormatError if the entry's bytes cannot be decoded here."""
    if entry.flags & FLAG_ENCRYPTED:
        raise ArchiveFormatError(f"entry {entry.name!r} is encrypted")
    if entry.method not in (METHOD_STORED, METHOD_DEFLATED):
        raise ArchiveFormatError(
            f"entry {entry.name!r} uses compression method {entry.method}; only stored and deflate work"
        )


class EntryDecoder:
    """Feed an entry's stored bytes in order; get its content, verified at finish().

    With verify=False (partial reads) only the size limit is enforced.
    """

    def __init__(self, entry: ZipEntry, *, verify: bool = True) -> None:
        check_decodable(entry)
        self._entry = entry
        self._verify = verify
        self._crc = 0
        self.produced = 0
        self._inflater = _library.decompressobj(-15) if entry.method == METHOD_DEFLATED else None

    def feed(self, data: bytes | memoryview) -> Iterator[bytes | memoryview]:
        """Yield the content bytes that `data` (the next stored bytes) decodes to."""
        if self._inflater is None:
            yield self._account(data)
            return
        pending = data
        while True:
            try:
                piece = self._inflater.decompress(pending, INFLATE_PIECE)
            except _library.error as exc:
                raise IntegrityError(f"entry {self._entry.name!r} has corrupt deflate data: {exc}") from None
            pending = self._inflater.unconsumed_tail
            if piece:
                yield self._account(piece)
            # a full piece may leave output inside the inflater with no input left: ask again
            if self._inflater.eof or (not pending and len(piece) < INFLATE_PIECE):
                break

    def finish(self) -> None:
        """Check that the whole entry decoded to its declared size and CRC-32."""
        if self._inflater is not None:
            rest = self._inflater.flush()
            if rest:
                self._account(rest)
            if not self._inflater.eof:
                raise IntegrityError(f"entry {self._entry.name!r}: deflate stream is truncated")
        if self.produced != self._entry.size:
            raise IntegrityError(
                f"entry {self._entry.name!r} decoded to {self.produced} bytes, expected {self._entry.size}"
            )
        if self._verify:
            verify_crc(self._entry, self._crc)

    def _account(self, piece: bytes | memoryview) -> bytes | memoryview:
        self.produced += len(piece)
        if self.produced > self._entry.size:
            raise IntegrityError(
                f"entry {self._entry.name!r} decodes to more than its declared {self._entry.size} bytes"
            )
        if self._verify:
            self._crc = crc32(piece, self._crc)
        return piece
