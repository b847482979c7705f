"""Where each entry's data starts in one archive (sans-IO): the one owner of that fact.

Only an entry's local header says where its data starts (torch's FB extra field is there alone).
Until it is read, an archive torch wrote is predicted: torch's writer pads every local header so
that data starts at a multiple of 64 (`zipfmt.predicted_data_offset`). A reader that reads at a
predicted offset counts the bytes only once the header confirms the offset (`settle`); a header
that refutes it ends predicting for the archive (its writer is not torch's). A confirmed offset is
never predicted again.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import zipfmt
from ..zipfmt import ZipEntry


class DataOffsets:
    """The data offsets of one archive's entries: confirmed (from a local header), or predicted
    while no header has refuted torch's layout."""

    def __init__(self, confirmed: Mapping[str, int] | None = None) -> None:
        self._confirmed: dict[str, int] = dict(confirmed or {})
        self._predicting = True

    def known(self, name: str) -> int | None:
        """The entry's confirmed data offset, or None before its local header is read."""
        return self._confirmed.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._confirmed

    def confirm(self, name: str, offset: int) -> None:
        """The entry's data offset, as its local header gives it."""
        self._confirmed[name] = offset

    @property
    def predicting(self) -> bool:
        """Whether no local header has refuted a prediction yet."""
        return self._predicting

    def predict(self, entry: ZipEntry) -> int | None:
        """Where torch's writer puts the entry's data; None once it is confirmed or predicting ended."""
        if not self._predicting or entry.name in self._confirmed:
            return None
        return zipfmt.predicted_data_offset(entry)

    def refute(self) -> None:
        """A local header put data elsewhere than predicted: no more predictions for this archive."""
        self._predicting = False

    def settle(self, entry: ZipEntry, offset: int) -> bool:
        """Confirm `offset` (found in the entry's local header) after a prediction: whether the
        prediction held (if not, predicting ends)."""
        self.confirm(entry.name, offset)
        held = offset == zipfmt.predicted_data_offset(entry)
        if not held:
            self.refute()
        return held

    def written_as_torch_does(self, entries: Mapping[str, ZipEntry] | None) -> bool:
        """Whether every offset confirmed so far among `entries` (the open's metadata entries) lies
        where torch's writer puts it, and none refuted a prediction: a whole plan may then be
        predicted (for an archive another tool wrote, a prediction that misses costs its bytes twice)."""
        if not entries or not self._predicting:
            return False
        checked = [name for name in self._confirmed if name in entries]
        return bool(checked) and all(
            self._confirmed[name] == zipfmt.predicted_data_offset(entries[name]) for name in checked
        )


def header_span(entry: ZipEntry) -> tuple[int, int]:
    """Archive bytes [start, end) that usually hold the entry's whole local header."""
    first = entry.header_offset
    return first, min(first + zipfmt.local_header_guess(entry), entry.region_end)
