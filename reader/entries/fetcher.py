"""Content bytes of ZIP entries from a byte source: local headers, ranges, inflating, CRC.

Whole-entry reads are always CRC-checked; partial reads of a stored entry
cannot be (the CRC covers the whole entry) and are length-checked only.

Where an entry's data starts is known only from its local header (torch's FB extra field is
there alone). A read near the entry's start asks for the header and the bytes in one range. A
read further in, before the header is known, is predicted: the header and the bytes where torch's
writer puts them (`zipfmt.predicted_data_offset`) are requested together, as two requests in
flight at once, so the first slice of a tensor costs one round trip, not two in a row; the header
decides, and bytes it does not confirm are read again from where it says (and the fetcher stops
predicting for this archive: its writer is not torch's). Two concurrent requests rather than one
multi-range request: every store answers them (S3 serves one range a request), and knowing whether
a server serves several ranges costs a probe round trip of its own, the one this saves; a second
request costs the store a request, not the client a round trip.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing

from .. import zipfmt
from ..errors import IntegrityError
from ..sources import DEFAULT_CHUNK_SIZE, ByteSource, Checked
from ..tasks import task_group
from ..zipfmt import ZipEntry
from .ranges import coalesce, containing
from .running_crc import InOrder, RunningCrc

# A range starting this far into an entry gets its header resolved separately
# rather than dragging the bytes in between along.
HEADER_PIGGYBACK_LIMIT = 64 << 10
# Bytes read at a predicted data offset before the header confirms it, at most: beyond this a round
# trip is small beside the transfer, and a wrong prediction would waste the bytes.
PREDICTED_READ_MAX = 16 << 20


class EntryFetcher:
    """Reads entry contents through one source, knowing where each entry's data starts.

    `data_offsets` are those the open already found (its metadata entries); the rest
    are found on first use, from the local header read together with the data.
    """

    def __init__(
        self,
        source: ByteSource,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        data_offsets: dict[str, int] | None = None,
    ) -> None:
        self.source = source
        self.chunk_size = chunk_size
        self._data_offsets: dict[str, int] = dict(data_offsets or {})
        self._predicting = True  # until a local header contradicts torch's layout

    def _predicts(self, entry: ZipEntry, nbytes: int) -> bool:
        """Whether to read `nbytes` of the entry at its predicted data offset, with its header."""
        if not self._predicting or entry.name in self._data_offsets or nbytes > PREDICTED_READ_MAX:
            return False
        # data that would overrun the entry's region cannot be where predicted: nothing to gain
        return zipfmt.predicted_data_offset(entry) + entry.compressed_size <= entry.region_end

    @property
    def known_offsets(self) -> dict[str, int]:
        """Data offsets found so far, by entry name; a bulk reader that parses local headers itself
        (reader.loading) adds the ones it finds, so later reads skip the header."""
        return self._data_offsets

    async def data_offset(self, entry: ZipEntry) -> int:
        if entry.name not in self._data_offsets:
            await self._read_from_header(entry, 0)
        return self._data_offsets[entry.name]

    async def _read_from_header(self, entry: ZipEntry, data_length: int, fetched: bytes = b"") -> bytes:
        """One read from the local header through `data_length` bytes of data (a second one if
        the header is longer than guessed); remembers the data offset, returns the data read.
        `fetched`: bytes from the header on already read (only what lies after them is asked for)."""
        first = entry.header_offset
        until = min(first + zipfmt.local_header_guess(entry) + data_length, entry.region_end)
        while True:
            if first + len(fetched) < until:
                fetched += await self.source.read(first + len(fetched), until)
            found = zipfmt.locate_data(entry, fetched, data_length)
            if not isinstance(found, zipfmt.NeedUntil):
                break
            until = found.end
        self._data_offsets[entry.name] = found
        return fetched[found - first : found - first + data_length]

    async def read(self, entry: ZipEntry, start: int = 0, end: int | None = None) -> bytes:
        """Content bytes [start, end) of the entry."""
        end = entry.size if end is None else end
        _check(entry, start, end)
        if start == end:
            return b""
        if entry.method != zipfmt.structs.METHOD_STORED:
            return b"".join([bytes(chunk) async for chunk in self.chunks(entry, start, end)])
        zipfmt.check_decodable(entry)
        data = await self._read_stored(entry, start, end)
        _verify_whole(entry, start, end, data)
        return data

    async def read_into(self, entry: ZipEntry, start: int, buffer: memoryview) -> None:
        """Content bytes [start, start + len(buffer)) of the entry into `buffer`, checked as `read`
        checks them: one read straight into it once the entry's data offset is known (a stored
        entry; remotely, a whole entry's CRC-32 follows its bytes as they land), else through `read`
        (which finds the offset, or inflates) and a copy."""
        end = start + len(buffer)
        _check(entry, start, end)
        offset = self._data_offsets.get(entry.name)
        if offset is None or entry.method != zipfmt.structs.METHOD_STORED or start == end:
            buffer[:] = await self.read(entry, start, end)
            return
        zipfmt.check_decodable(entry)
        if self.source.reports_landed and start == 0 and end == entry.size:
            # the whole entry: its CRC-32 taken on a worker as the bytes land, not after the last one
            running = RunningCrc(entry)
            await self.source.read_into(offset, buffer, landed=InOrder(running, buffer, offset))
            await running.verify()
            return
        await self.source.read_into(offset + start, buffer)
        _verify_whole(entry, start, end, buffer)

    async def read_many(self, ranges: Sequence[tuple[ZipEntry, int, int]]) -> list[bytes]:
        """Content bytes of several (entry, start, end) ranges at once.

        Stored ranges lying close together in the archive come in one request per coalesced group,
        local headers included; groups are fetched in parallel. An entry whose data offset is
        unknown and whose ranges lie further in is predicted (module docstring): its header and
        its ranges at the predicted offset are among the groups, and the ranges the header does
        not confirm are read again.
        """
        results: list[bytes] = [b""] * len(ranges)
        stored: list[tuple[int, ZipEntry, int, int]] = []
        for index, (entry, start, end) in enumerate(ranges):
            _check(entry, start, end)
            if start == end:
                continue
            if entry.method != zipfmt.structs.METHOD_STORED:
                results[index] = await self.read(entry, start, end)
                continue
            zipfmt.check_decodable(entry)
            stored.append((index, entry, start, end))
        predicted = await self._plan_offsets(stored)
        pending: list[tuple[int, ZipEntry, int, int, tuple[int, int]]] = []
        for index, entry, start, end in stored:
            at = self._data_offsets.get(entry.name)
            if at is None:
                at = predicted.get(entry.name)
            if at is not None:
                region = (at + start, at + end)
            else:  # from the local header on, near the entry's start
                first = entry.header_offset
                region = (first, min(first + zipfmt.local_header_guess(entry) + end, entry.region_end))
            pending.append((index, entry, start, end, region))
        headers = [_header_region(entry) for entry in _entries_of(stored, predicted)]
        groups = coalesce([region for *_, region in pending] + headers)
        fetched = await asyncio.gather(*(self.source.read(low, high) for low, high in groups))
        for entry in _entries_of(stored, predicted):
            await self._locate(entry, _cut(groups, fetched, *_header_region(entry), partial=True))
        again: list[tuple[int, ZipEntry, int, int]] = []
        for index, entry, start, end, (low, high) in pending:
            known = self._data_offsets.get(entry.name)
            if known is None:
                group = containing(groups, low)
                window = memoryview(fetched[group])[low - groups[group][0] : high - groups[group][0]]
                data = self._slice_from(entry, window, low, start, end)
            else:
                data = _cut(groups, fetched, known + start, known + end)
            if data is None:
                again.append((index, entry, start, end))  # a longer header, or a wrong prediction
                continue
            _verify_whole(entry, start, end, data)
            results[index] = bytes(data)
        reread = await asyncio.gather(*(self.read(entry, start, end) for _, entry, start, end in again))
        for (index, *_), data in zip(again, reread, strict=True):
            results[index] = data  # `read` checks its own CRC
        return results

    async def _plan_offsets(self, stored: Sequence[tuple[int, ZipEntry, int, int]]) -> dict[str, int]:
        """The predicted data offsets of the entries read at one (their headers come alongside);
        entries with ranges beyond HEADER_PIGGYBACK_LIMIT that are not predicted get their header
        read first (all at once), so the bytes before their ranges are not read."""
        far: dict[str, tuple[ZipEntry, int]] = {}
        for _, entry, start, end in stored:
            if entry.name not in self._data_offsets and start > HEADER_PIGGYBACK_LIMIT:
                _, nbytes = far.get(entry.name, (entry, 0))
                far[entry.name] = (entry, nbytes + end - start)
        predicted = {
            name: zipfmt.predicted_data_offset(entry)
            for name, (entry, nbytes) in far.items()
            if self._predicts(entry, nbytes)
        }
        first = [entry for name, (entry, _) in far.items() if name not in predicted]
        await asyncio.gather(*(self.data_offset(entry) for entry in first))
        return predicted

    async def _locate(self, entry: ZipEntry, header: bytes | memoryview | None) -> None:
        """Record the entry's data offset from the bytes read at its local header (the rest of the
        header read when it is longer than guessed); a wrong prediction ends predicting."""
        await self._read_from_header(entry, 0, bytes(header or b""))
        if self._data_offsets[entry.name] != zipfmt.predicted_data_offset(entry):
            self._predicting = False

    def _slice_from(self, entry: ZipEntry, window: memoryview, at: int, start: int, end: int) -> bytes | None:
        """Bytes [start, end) of the entry out of archive bytes starting at `at`; None if the
        window is short (a local header longer than guessed)."""
        known = self._data_offsets.get(entry.name)
        if known is None:
            found = zipfmt.locate_data(entry, window, end)
            if isinstance(found, zipfmt.NeedUntil):
                return None
            known = self._data_offsets[entry.name] = found
        return bytes(window[known - at + start : known - at + end])

    def chunks(
        self, entry: ZipEntry, start: int = 0, end: int | None = None, chunk_size: int | None = None
    ) -> AsyncIterator[bytes | memoryview]:
        """Content bytes [start, end) in chunks; whole-entry streams are CRC-checked at the end."""
        end = entry.size if end is None else end
        _check(entry, start, end)
        zipfmt.check_decodable(entry)
        chunk_size = chunk_size or self.chunk_size
        stored = entry.method == zipfmt.structs.METHOD_STORED
        if start == end:
            return _nothing()
        if stored and (start > 0 or end < entry.size):
            return self._stored_chunks(entry, start, end, chunk_size)  # part of an entry: no CRC covers it
        if not stored:
            return self._verified(entry, self._inflated(entry, start, end, chunk_size), None)
        running = RunningCrc(entry)
        checked = running.checked if self.source.reports_crcs else None
        return self._verified(entry, self._stored_chunks(entry, start, end, chunk_size, checked), running)

    async def _verified(
        self, entry: ZipEntry, pieces: AsyncIterator[bytes | memoryview], running: RunningCrc | None
    ) -> AsyncIterator[bytes | memoryview]:
        """Chunks that reach the entry's end, the last one held back until the entry is verified
        (its CRC-32 in `running`, taken on a worker while the next chunk arrives, or by the
        inflater), so a consumer that forwards chunks (the service) never completes a corrupt body."""
        held: bytes | memoryview | None = None
        async with aclosing(pieces) as chunks:
            async for chunk in chunks:
                if running is not None:
                    if running.at is None:  # the first chunk: the data offset is known by now
                        running.at = self._data_offsets.get(entry.name)
                    running.add(chunk)
                if held is not None:
                    yield held
                held = chunk
        if running is not None:
            await running.verify()
        if held is not None:
            yield held

    def _stream(
        self, start: int, end: int, chunk_size: int, checked: Checked | None
    ) -> AsyncIterator[bytes | memoryview]:
        """The source's stream; `checked` only where given (a source's own `stream` may not take it)."""
        if checked is None:
            return self.source.stream(start, end, chunk_size=chunk_size)
        return self.source.stream(start, end, chunk_size=chunk_size, checked=checked)

    def _stored_chunks(
        self, entry: ZipEntry, start: int, end: int, chunk_size: int, checked: Checked | None = None
    ) -> AsyncIterator[bytes | memoryview]:
        """`checked`: told of CRC-32s the source took as it received the bytes (RunningCrc.checked)."""
        known = self._data_offsets.get(entry.name)
        if known is not None:
            return self._stream(known + start, known + end, chunk_size, checked)
        if start <= HEADER_PIGGYBACK_LIMIT:
            return self._chunks_with_header(entry, start, end, chunk_size, checked)
        return self._chunks_after_header(entry, start, end, chunk_size, checked)

    async def _chunks_after_header(
        self, entry: ZipEntry, start: int, end: int, chunk_size: int, checked: Checked | None
    ) -> AsyncIterator[bytes | memoryview]:
        """The range streamed once the data offset is known: asked for at the predicted offset
        together with the local header (module docstring), its first chunk held until the header
        confirms it; else the header first (one small read), then the range."""
        if self._predicts(entry, end - start):
            guess = zipfmt.predicted_data_offset(entry)
            predicted = self._stream(guess + start, guess + end, chunk_size, checked)
            async with aclosing(predicted) as chunks:
                async with task_group() as group:
                    header = group.create_task(self.source.read(*_header_region(entry)))
                    first = group.create_task(anext(chunks))
                await self._locate(entry, header.result())
                if self._data_offsets[entry.name] == guess:
                    yield first.result()
                    async for chunk in chunks:
                        yield chunk
                    return
        offset = await self.data_offset(entry)
        async with aclosing(self._stream(offset + start, offset + end, chunk_size, checked)) as chunks:
            async for chunk in chunks:
                yield chunk

    async def _chunks_with_header(
        self, entry: ZipEntry, start: int, end: int, chunk_size: int, checked: Checked | None
    ) -> AsyncIterator[bytes | memoryview]:
        """Stream from the local header on, so one request covers header and data.

        The header length is guessed; a longer one means a second request for
        the last bytes, a shorter one means a few bytes past `end` are dropped.
        """
        first = entry.header_offset
        stop = min(first + zipfmt.local_header_guess(entry) + end, entry.region_end)
        pending = b""
        position = None  # data position of the chunk in hand, once the header is parsed
        async with aclosing(self._stream(first, stop, chunk_size, checked)) as chunks:
            async for chunk in chunks:
                if position is None:
                    pending += bytes(chunk)
                    found = zipfmt.locate_data(entry, pending)
                    if isinstance(found, zipfmt.NeedUntil):
                        if first + len(pending) < stop:
                            continue
                        break  # header longer than everything asked for: finish below
                    self._data_offsets[entry.name] = found
                    chunk, position = memoryview(pending)[found - first :], 0
                low, high = max(start - position, 0), min(end - position, len(chunk))
                if high > low:
                    yield chunk[low:high]
                position += len(chunk)
                if position >= end:
                    return
        offset = await self.data_offset(entry)
        resume = max(start, position or 0)
        rest = self._stream(offset + resume, offset + end, chunk_size, checked)
        async with aclosing(rest) as rest:
            async for chunk in rest:
                yield chunk

    async def _read_stored(self, entry: ZipEntry, start: int, end: int) -> bytes:
        known = self._data_offsets.get(entry.name)
        if known is not None:
            return await self.source.read(known + start, known + end)
        if start > HEADER_PIGGYBACK_LIMIT:
            return (await self.read_many([(entry, start, end)]))[0]  # predicted, or the header first
        data = await self._read_from_header(entry, end)
        return data[start:end]

    async def _inflated(
        self, entry: ZipEntry, start: int, end: int, chunk_size: int
    ) -> AsyncIterator[bytes | memoryview]:
        """Inflate from the entry's start, yielding only [start, end); verify if it reaches the end."""
        offset = await self.data_offset(entry)
        whole_tail = end == entry.size
        decoder = zipfmt.EntryDecoder(entry, verify=whole_tail)
        position = 0
        compressed = self.source.stream(offset, offset + entry.compressed_size, chunk_size=chunk_size)
        try:
            async for chunk in compressed:
                for piece in decoder.feed(chunk):
                    piece_end = position + len(piece)
                    if piece_end > start and position < end:
                        yield memoryview(piece)[max(start - position, 0) : min(end, piece_end) - position]
                    position = piece_end
                if position >= end and not whole_tail:
                    return
            decoder.finish()
        finally:
            await compressed.aclose()
        if position < end:
            raise IntegrityError(f"entry {entry.name!r} ended after {position} of {end} bytes")


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing


def _header_region(entry: ZipEntry) -> tuple[int, int]:
    """The bytes that usually hold the entry's whole local header."""
    first = entry.header_offset
    return first, min(first + zipfmt.local_header_guess(entry), entry.region_end)


def _entries_of(stored: Sequence[tuple[int, ZipEntry, int, int]], names: dict[str, int]) -> list[ZipEntry]:
    """Each entry of `stored` named in `names`, once, in order."""
    return list({entry.name: entry for _, entry, *_ in stored if entry.name in names}.values())


def _cut(
    groups: Sequence[tuple[int, int]], fetched: Sequence[bytes], low: int, high: int, partial: bool = False
) -> memoryview | None:
    """Archive bytes [low, high) out of the fetched groups; None unless one group holds them (with
    `partial`, what one group holds from `low` on, up to `high`)."""
    group = containing(groups, low)
    if group < 0 or groups[group][1] <= low or (groups[group][1] < high and not partial):
        return None
    base = groups[group][0]
    return memoryview(fetched[group])[low - base : min(high, groups[group][1]) - base]


def _check(entry: ZipEntry, start: int, end: int) -> None:
    if not 0 <= start <= end <= entry.size:
        raise ValueError(f"range [{start}, {end}) is outside entry {entry.name!r} ({entry.size} bytes)")


def _verify_whole(entry: ZipEntry, start: int, end: int, data: bytes | memoryview) -> None:
    """Bytes [start, end) of a stored entry, checked against its CRC-32 when they are all of it
    (the CRC covers the whole entry; a part of it cannot be checked on its own)."""
    if start == 0 and end == entry.size:
        zipfmt.verify_crc(entry, zipfmt.crc32(data))
