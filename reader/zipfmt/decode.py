"""Turn an entry's stored bytes into its content, checking size and CRC-32.

zlib-ng does the inflating and CRC (same results as zlib, about 8x faster CRC),
so verifying a whole entry costs little next to reading it.
"""

from __future__ import annotations

from collections.abc import Iterator

from zlib_ng import zlib_ng

from ..errors import ArchiveFormatError, IntegrityError
from .records import ZipEntry
from .structs import FLAG_ENCRYPTED, METHOD_DEFLATED, METHOD_STORED

# Inflate in bounded pieces so a small compressed chunk can never become a huge buffer.
INFLATE_PIECE = 4 << 20

crc32 = zlib_ng.crc32


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
        self._inflater = zlib_ng.decompressobj(-15) if entry.method == METHOD_DEFLATED else None

    def feed(self, data: bytes | memoryview) -> Iterator[bytes | memoryview]:
        """Yield the content bytes that `data` (the next stored bytes) decodes to."""
        if self._inflater is None:
            yield self._account(data)
            return
        pending = data
        while pending:
            try:
                piece = self._inflater.decompress(pending, INFLATE_PIECE)
            except zlib_ng.error as exc:
                raise IntegrityError(f"entry {self._entry.name!r} has corrupt deflate data: {exc}") from None
            pending = self._inflater.unconsumed_tail
            if piece:
                yield self._account(piece)
            if self._inflater.eof:
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
