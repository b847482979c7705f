"""The one cap on an archive's decompressed metadata, counted across its entries.

An archive's metadata (the configs, a checkpoint's or a nested package's data.pkl, the programs'
JSON under models/) is inflated and parsed in memory. Each entry stopping at its declared size is
not enough: an archive of 2 MB can hold eight configs that inflate to 255 MiB each. So every
metadata entry an archive reads, at open or later (a graph), is counted by its declared size
against one budget per opened archive before a byte of it is inflated, and the decoder stops an
entry at its declared size (`zipfmt.EntryDecoder`): what is inflated never passes the cap by more
than one inflate piece.
"""

from __future__ import annotations

from ..errors import ArchiveFormatError
from ..zipfmt import ZipEntry

MAX_METADATA_BYTES = 256 << 20  # decompressed metadata of one archive, all entries together


class MetadataBudget:
    """What one archive's metadata entries may inflate to, together (MAX_METADATA_BYTES unless
    told); an entry is counted once however often it is read."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = MAX_METADATA_BYTES if limit is None else limit
        self.used = 0
        self._counted: set[str] = set()

    def take(self, entry: ZipEntry) -> None:
        """Count `entry` in, or raise ArchiveFormatError naming the cap (nothing is counted then)."""
        if entry.name in self._counted:
            return
        if self.used + entry.size > self.limit:
            raise ArchiveFormatError(
                f"metadata entry {entry.name!r} claims {entry.size} bytes: with the {self.used} bytes of "
                f"metadata before it, over the archive's cap of {self.limit} bytes of decompressed "
                "metadata (MAX_METADATA_BYTES); refusing to inflate it"
            )
        self.used += entry.size
        self._counted.add(entry.name)


__all__ = ["MAX_METADATA_BYTES", "MetadataBudget"]
