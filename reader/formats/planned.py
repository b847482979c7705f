"""Bundles read as a plan: runs of tensors that lie in order in the archive come as one range.

A bundle (safetensors, .ptd) is its parts back to back: headers and padding in memory, and
tensors. Read part by part, a remote bundle costs a request per tensor, each waiting for the
one before, well below what the storage gives (bench/README.md). Here the tensor
parts that follow each other in the archive (each after the one before, less than a gap apart)
make one run, read as one range (`source.stream`: parallel parts over several connections,
resumed and retried, pinned to the object) and demultiplexed across the local headers in
between (formats/demux.py), with the in-memory parts in between sent in their place. Memory
stays what one stream holds; every whole payload is CRC-checked before its last byte goes out.
Any byte range of the body maps onto the same runs, so Range requests are served by them too.
Bytes a body sends twice (a tied weight in a safetensors file) are read once: the first copy is
spooled to local disk as it goes out and the second is sent from there (spool.py).

Local archives keep reading part by part (a pread per tensor from the page cache costs less than
the demultiplexing), and so do tensors that are gathered or zeros.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import NamedTuple

from ..bodies.tensor import TensorBytes
from ..entries.fetcher import HEADER_PIGGYBACK_LIMIT, EntryFetcher
from ..loading.plan import RANGE_GAP
from ..zipfmt.structs import METHOD_STORED
from .body import Body, BytesBody, Chunk, ConcatBody
from .demux import Demux, Target, range_bounds
from .spool import Spool


@dataclass(frozen=True, slots=True)
class _Slice:
    part: Body
    low: int
    high: int


def _plannable(part: Body) -> bool:
    return (
        isinstance(part, TensorBytes) and part.direct and part.needs_payload and not part.fetcher.source.local
    )


class PlannedBody(ConcatBody):
    """ConcatBody whose tensor parts are read as runs of one range each (see the module)."""

    def __init__(self, parts: Sequence[Body], gap: int = RANGE_GAP) -> None:
        super().__init__(parts)
        self.gap = gap

    async def chunks(self, start: int, end: int, chunk_size: int) -> AsyncIterator[Chunk]:
        slices = self._slices(start, end)
        counts = Counter(_key(piece) for piece in slices if _plannable(piece.part))
        spool = Spool((key, key.high - key.low) for key, count in counts.items() if count > 1)
        try:
            for run in self._runs(slices, spool):
                only = run[0] if len(run) == 1 else None
                chunks: AsyncIterator[Chunk]
                if only is not None and not _plannable(only.part):
                    chunks = only.part.chunks(only.low, only.high, chunk_size)
                elif only is not None and spool.has(_key(only)):  # its bytes went out before
                    chunks = spool.read(_key(only), chunk_size)
                else:
                    chunks = self._run_chunks(run, spool, chunk_size)
                async with aclosing(chunks) as pieces:
                    async for chunk in pieces:
                        yield chunk
        finally:
            spool.close()

    def _slices(self, start: int, end: int) -> list[_Slice]:
        slices, offset = [], 0
        for part in self.parts:
            low, high = max(start - offset, 0), min(end - offset, part.length)
            if high > low:
                slices.append(_Slice(part, low, high))
            offset += part.length
        return slices

    def _runs(self, slices: list[_Slice], spool: Spool) -> list[list[_Slice]]:
        """Slices grouped: a run holds tensors in archive order (and the in-memory parts between
        them); anything else is a run of its own, and so is a tensor slice sent before (its second
        copy comes from the spool)."""
        runs: list[list[_Slice]] = []
        current: list[_Slice] = []
        last: TensorBytes | None = None
        sent: set[_Sent] = set()

        def close() -> None:
            nonlocal current, last
            if current:
                runs.append(current)
            current, last = [], None

        for piece in slices:
            part = piece.part
            key = _key(piece) if _plannable(part) else None
            repeated = key in sent
            if key in spool.wanted:
                sent.add(key)
            if repeated:
                close()
                runs.append([piece])
            elif _plannable(part):
                assert isinstance(part, TensorBytes)
                if last is not None and not self._follows(last, part):
                    close()
                current.append(piece)
                last = part
            elif isinstance(part, BytesBody) and current:
                current.append(piece)
            else:
                close()
                runs.append([piece])
        close()
        # in-memory parts left at the end of a run are runs of their own
        return [run for group in runs for run in _trim(group)]

    def _follows(self, before: TensorBytes, after: TensorBytes) -> bool:
        return (
            after.fetcher is before.fetcher
            and after.entry.header_offset > before.entry.header_offset
            and after.entry.header_offset - before.entry.region_end <= self.gap
        )

    async def _run_chunks(self, run: list[_Slice], spool: Spool, chunk_size: int) -> AsyncIterator[Chunk]:
        tensors = [piece for piece in run if isinstance(piece.part, TensorBytes)]
        spooled = [key if key in spool.wanted else None for key in map(_key, tensors)]
        fetcher = tensors[0].part.fetcher  # type: ignore[attr-defined]
        targets = [_target(piece) for piece in tensors]
        offsets = fetcher.offsets
        await _resolve_ends(fetcher, targets)
        low, high = range_bounds(targets, offsets)
        demux = Demux(low, targets, offsets)
        pending = list(run)  # slices still to send, in order

        async def send_memory() -> AsyncIterator[Chunk]:
            while pending and not isinstance(pending[0].part, TensorBytes):
                piece = pending.pop(0)
                async with aclosing(piece.part.chunks(piece.low, piece.high, chunk_size)) as chunks:
                    async for chunk in chunks:
                        yield chunk

        async with aclosing(fetcher.source.stream(low, high, chunk_size=chunk_size)) as stream:
            async for received in stream:
                for index, at, data, check in demux.feed(received):
                    async for chunk in send_memory():
                        yield chunk
                    if check is not None:  # the entry's last bytes: its CRC-32 first
                        await check.verify()
                    key = spooled[index]
                    if key is not None:  # its bytes go out again later: keep a copy
                        await spool.write(key, data)
                    for cut in range(0, len(data), chunk_size):
                        yield data[cut : cut + chunk_size]
                    if at + len(data) >= targets[index].end:
                        pending.pop(0)  # this tensor's slice is sent
                        if key is not None:
                            spool.seal(key)
                if demux.done:
                    break
        demux.close()
        async for chunk in send_memory():
            yield chunk


class _Sent(NamedTuple):
    """What a tensor slice sends: content bytes [low, high) of an entry of a source, whichever name."""

    fetcher: EntryFetcher
    entry: str
    low: int
    high: int


def _key(piece: _Slice) -> _Sent:
    tensor = piece.part
    assert isinstance(tensor, TensorBytes)
    first = tensor.span[0]
    return _Sent(tensor.fetcher, tensor.entry.name, first + piece.low, first + piece.high)


def _target(piece: _Slice) -> Target:
    tensor = piece.part
    assert isinstance(tensor, TensorBytes)
    first = tensor.span[0]
    return Target(tensor.entry, first + piece.low, first + piece.high)


async def _resolve_ends(fetcher: EntryFetcher, targets: list[Target]) -> None:
    """Find the data offset of a run's first entry when the run starts far into it, and of its
    last when it ends before that entry's end (else the range would carry the bytes between)."""
    first, last = targets[0], targets[-1]
    if first.low > HEADER_PIGGYBACK_LIMIT:
        await fetcher.data_offset(first.entry)
    if not last.whole and last.entry.method == METHOD_STORED:
        await fetcher.data_offset(last.entry)


def _trim(run: list[_Slice]) -> list[list[_Slice]]:
    """A run without its trailing in-memory parts, then each of those on its own."""
    end = len(run)
    while end and not _plannable(run[end - 1].part):
        end -= 1
    if end == 0:
        return [[piece] for piece in run]
    return [run[:end], *([piece] for piece in run[end:])]


__all__ = [
    "PlannedBody",
]
