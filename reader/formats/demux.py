"""Archive bytes of one range -> the content of the entries in it, piece by piece (sans-IO).

A range read by the load plan starts at an entry's local header (or at its data, when the offset is
already known) and runs across the entries after it, local headers and data descriptors included.
`Demux.feed` takes the range's bytes in order, in chunks of any size, hands each local header to
zipfmt's LocalHeaderParser as it passes (checked against the central directory, as every read of the
reader does), and hands back where each piece of content goes. Stored content comes out as views of
the chunk fed in (nothing copied); DEFLATE content is inflated. A target that covers a whole entry
is checked against its CRC-32 before its last piece is sent on, so a consumer that forwards pieces
never completes a corrupt entry: a stored entry's CRC-32 is taken on a worker thread while the next
bytes arrive (reader.entries.running_crc), and its last piece comes with the `RunningCrc` to await
first; a DEFLATE entry is checked by its inflater before its last piece is handed back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .. import zipfmt
from ..entries.offsets import DataOffsets
from ..entries.running_crc import RunningCrc
from ..errors import IntegrityError
from ..zipfmt import ZipEntry
from ..zipfmt.structs import METHOD_STORED

# (target index, content offset, bytes, the check to await before sending them: the last piece of
# a whole stored entry)
Piece = tuple[int, int, bytes | memoryview, RunningCrc | None]


@dataclass(frozen=True, slots=True)
class Target:
    """Content bytes [low, high) of `entry` (the whole entry by default)."""

    entry: ZipEntry
    low: int = 0
    high: int = -1

    @property
    def end(self) -> int:
        return self.entry.size if self.high < 0 else self.high

    @property
    def whole(self) -> bool:
        return self.low == 0 and self.end == self.entry.size


def range_bounds(targets: Sequence[Target], data_offsets: DataOffsets) -> tuple[int, int]:
    """The archive bytes a Demux of `targets` needs. A target whose data offset is unknown must be
    whole (its header is read from the range and its region bounds it) or deflated."""
    first, last = targets[0], targets[-1]
    start = _seek_point(first, data_offsets.known(first.entry.name))
    known = data_offsets.known(last.entry.name)
    entry = last.entry
    if known is None:
        end = entry.region_end
    elif entry.method == METHOD_STORED:
        end = known + last.end
    else:
        end = known + entry.compressed_size
    return start, end


def _seek_point(target: Target, known: int | None) -> int:
    if known is None:
        return target.entry.header_offset
    return known + (target.low if target.entry.method == METHOD_STORED else 0)


class Demux:
    """Feed archive bytes from `start`; get `Piece`s. `data_offsets` are the offsets already known
    (the ones found here are added to it, so later reads skip the header)."""

    def __init__(self, start: int, targets: Sequence[Target], data_offsets: DataOffsets) -> None:
        self.at = start
        self._targets = list(targets)
        self._offsets = data_offsets
        self._index = 0
        self._header: zipfmt.LocalHeaderParser | None = None
        self._data_start: int | None = None
        self._position = 0  # content offset of the next stored byte of the current target
        self._crc: RunningCrc | None = None
        self._decoder: zipfmt.EntryDecoder | None = None
        self._enter()

    @property
    def done(self) -> bool:
        return self._index >= len(self._targets)

    def feed(self, chunk: bytes | memoryview) -> list[Piece]:
        out: list[Piece] = []
        view = memoryview(chunk).cast("B")
        while view and not self.done:
            used = self._step(view, out)
            view = view[used:]
            self.at += used
        return out

    def close(self) -> None:
        """The range ended: every target must be complete."""
        if not self.done:
            entry = self._targets[self._index].entry
            raise IntegrityError(f"entry {entry.name!r}: the range ended before its data did (at {self.at})")

    # -- one step: consume some bytes of `view` for the current target ----------------------

    def _enter(self) -> None:
        """Start the current target: its data offset is known or its header comes next."""
        if self.done:
            return
        target = self._targets[self._index]
        self._data_start = self._offsets.known(target.entry.name)
        if self._data_start is not None:
            self._header = None
            self._begin_data(target)
        else:
            self._header = zipfmt.LocalHeaderParser(target.entry)

    def _begin_data(self, target: Target) -> None:
        entry = target.entry
        zipfmt.check_decodable(entry)
        stored = entry.method == METHOD_STORED
        self._position = target.low if stored else 0  # stored: content offset; deflate: bytes fed
        self._crc = RunningCrc(entry) if stored and target.whole else None
        self._decoder = None if stored else zipfmt.EntryDecoder(entry, verify=target.whole)

    def _step(self, view: memoryview, out: list[Piece]) -> int:
        index = self._index
        target = self._targets[index]
        if self._data_start is None:
            return self._step_header(target, view)
        wanted = self._data_start + self._position  # the next archive byte this target needs
        if self.at < wanted:  # bytes in between: another entry's, a data descriptor
            return min(len(view), wanted - self.at)
        if self.at > wanted:
            raise IntegrityError(f"entry {target.entry.name!r}: its data starts before the range read")
        if self._decoder is None:
            return self._step_stored(index, target, view, out)
        return self._step_deflated(index, target, view, out)

    def _step_header(self, target: Target, view: memoryview) -> int:
        entry = target.entry
        if self.at < entry.header_offset:
            return min(len(view), entry.header_offset - self.at)
        header = self._header
        assert header is not None
        if self.at != entry.header_offset + header.taken:
            raise IntegrityError(f"entry {entry.name!r}: its local header starts before the range read")
        take = header.feed(view)
        if header.data_offset is not None:
            self._data_start = header.data_offset
            self._offsets.confirm(entry.name, self._data_start)
            self._begin_data(target)
        return take

    def _step_stored(self, index: int, target: Target, view: memoryview, out: list[Piece]) -> int:
        take = min(len(view), target.end - self._position)
        piece = view[:take]
        running = self._crc
        if running is not None:
            running.add(piece)
        at = self._position
        self._position += take
        last = self._position >= target.end
        if last:
            if running is not None and not take:  # an empty entry: nothing to send, check it here
                zipfmt.verify_crc(target.entry, 0)
            self._next()
        if take:
            out.append((index, at, piece, running if last else None))
        return take

    def _step_deflated(self, index: int, target: Target, view: memoryview, out: list[Piece]) -> int:
        entry = target.entry
        decoder = self._decoder
        assert decoder is not None
        take = min(len(view), entry.compressed_size - self._position)
        for piece in decoder.feed(view[:take]):
            end = decoder.produced
            begin = end - len(piece)
            low, high = max(target.low, begin), min(target.end, end)
            if high > low:
                out.append((index, low, bytes(piece[low - begin : high - begin]), None))
        self._position += take
        if self._position >= entry.compressed_size:
            decoder.finish()  # size and CRC-32 (when the target is whole)
            self._next()
        elif decoder.produced >= target.end and not target.whole:
            self._next()
        return take

    def _next(self) -> None:
        self._index += 1
        self._enter()
