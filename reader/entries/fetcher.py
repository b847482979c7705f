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

from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing

from .. import zipfmt
from ..errors import IntegrityError
from ..sources import DEFAULT_CHUNK_SIZE, ByteSource, Checked
from ..tasks import task_group
from ..zipfmt import ZipEntry
from .batched import HEADER_PIGGYBACK_LIMIT, read_many
from .offsets import DataOffsets, header_span
from .ranges import check_range, verify_whole
from .running_crc import InOrder, RunningCrc

# Bytes read at a predicted data offset before the header confirms it, at most: beyond this a round
# trip is small beside the transfer, and a wrong prediction would waste the bytes.
PREDICTED_READ_MAX = 16 << 20


class EntryFetcher:
    """Reads entry contents through one source, knowing where each entry's data starts.

    `data_offsets` are those the open already found (its metadata entries); the rest are found
    on first use, from the local header read together with the data, and kept in `offsets` (the
    archive's `DataOffsets`, which bulk readers that parse local headers themselves confirm too).
    """

    def __init__(
        self,
        source: ByteSource,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        data_offsets: dict[str, int] | None = None,
    ) -> None:
        self.source = source
        self.chunk_size = chunk_size
        self.offsets = DataOffsets(data_offsets)

    def predicts(self, entry: ZipEntry, nbytes: int) -> int | None:
        """Where to read `nbytes` of the entry with its header before the header confirms it (the
        predicted data offset), or None: not predicted, too many bytes to risk, or data that would
        overrun the entry's region (it cannot be where predicted: nothing to gain)."""
        guess = self.offsets.predict(entry)
        if guess is None or nbytes > PREDICTED_READ_MAX or guess + entry.compressed_size > entry.region_end:
            return None
        return guess

    async def data_offset(self, entry: ZipEntry) -> int:
        known = self.offsets.known(entry.name)
        if known is None:
            await self._read_from_header(entry, 0)
            known = self.offsets.known(entry.name)
            assert known is not None
        return known

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
        self.offsets.confirm(entry.name, found)
        return fetched[found - first : found - first + data_length]

    async def settle(self, entry: ZipEntry, header: bytes | memoryview | None) -> bool:
        """Confirm the entry's data offset from the bytes read at its local header (the rest of the
        header read when it is longer than guessed) after a prediction: whether the prediction held
        (a wrong one ends predicting: `DataOffsets.settle`)."""
        await self._read_from_header(entry, 0, bytes(header or b""))
        found = self.offsets.known(entry.name)
        assert found is not None
        return self.offsets.settle(entry, found)

    async def read(self, entry: ZipEntry, start: int = 0, end: int | None = None) -> bytes:
        """Content bytes [start, end) of the entry."""
        end = entry.size if end is None else end
        check_range(entry, start, end)
        if start == end:
            return b""
        if entry.method != zipfmt.structs.METHOD_STORED:
            return b"".join([bytes(chunk) async for chunk in self.chunks(entry, start, end)])
        zipfmt.check_decodable(entry)
        data = await self._read_stored(entry, start, end)
        verify_whole(entry, start, end, data)
        return data

    async def read_into(self, entry: ZipEntry, start: int, buffer: memoryview) -> None:
        """Content bytes [start, start + len(buffer)) of the entry into `buffer`, checked as `read`
        checks them: one read straight into it once the entry's data offset is known (a stored
        entry; remotely, a whole entry's CRC-32 follows its bytes as they land), else through `read`
        (which finds the offset, or inflates) and a copy."""
        end = start + len(buffer)
        check_range(entry, start, end)
        offset = self.offsets.known(entry.name)
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
        verify_whole(entry, start, end, buffer)

    async def read_many(self, ranges: Sequence[tuple[ZipEntry, int, int]]) -> list[bytes]:
        """Content bytes of several (entry, start, end) ranges at once (`batched.read_many`: ranges
        close together in one request, local headers included; unknown offsets predicted)."""
        return await read_many(self, ranges)

    def chunks(
        self, entry: ZipEntry, start: int = 0, end: int | None = None, chunk_size: int | None = None
    ) -> AsyncIterator[bytes | memoryview]:
        """Content bytes [start, end) in chunks; whole-entry streams are CRC-checked at the end."""
        end = entry.size if end is None else end
        check_range(entry, start, end)
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
                        running.at = self.offsets.known(entry.name)
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
        known = self.offsets.known(entry.name)
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
        guess = self.predicts(entry, end - start)
        if guess is not None:
            predicted = self._stream(guess + start, guess + end, chunk_size, checked)
            async with aclosing(predicted) as chunks:
                async with task_group() as group:
                    header = group.create_task(self.source.read(*header_span(entry)))
                    first = group.create_task(anext(chunks))
                if await self.settle(entry, header.result()):
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
                    self.offsets.confirm(entry.name, found)
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
        known = self.offsets.known(entry.name)
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
