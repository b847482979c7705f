"""The bytes of a load plan's storages: one NumPy uint8 buffer per payload entry.

- A local archive is memory-mapped (copy-on-write): a stored entry's buffer is a view of the
  mapping, so nothing is read until the bytes are touched. `copy=True` copies them into owned
  buffers (and checks each CRC-32 on the way); DEFLATE entries are always inflated.
- Any other source (HTTP, S3, ...) reads the plan's ranges through `source.stream`, which
  fetches a big range as parallel parts over several connections (retried and resumed, pinned
  to the object's version); each piece is copied from the received chunk straight into its
  storage's buffer, on a copying thread while the event loop receives the next bytes (the copy,
  with its page faults, took as long as receiving did). Memory: the buffers plus the parts in
  flight plus the few pieces waiting to be copied.

`verify=None` checks every CRC-32 of what is read (everything, remotely); memory-mapped views
are not read, so they are checked only with `verify=True`.
"""

from __future__ import annotations

import asyncio
import functools
import mmap
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing

import numpy as np

from .. import zipfmt
from ..errors import IntegrityError, SourceChanged
from ..reading.entries import EntryFetcher
from ..sources import ByteSource, LocalFileSource
from ..sources.local import _identity as file_identity
from ..zipfmt import ZipEntry
from ..zipfmt.structs import METHOD_STORED
from .demux import Demux, Target, range_bounds
from .plan import LoadPlan, ReadRange

Buffers = dict[str, np.ndarray]
# Ranges at most this big are read several at a time (each is a round trip more than bytes);
# bigger ones are read one after the other, each as parallel parts (the parts bound the memory).
SMALL_RANGE = 16 << 20
SMALL_RANGES_AT_ONCE = 8
STREAM_CHUNK = 4 << 20
# Pieces at least this big are copied on the copying thread, with at most COPIES_AHEAD waiting.
COPY_IN_THREAD = 256 << 10
COPIES_AHEAD = 8


async def read_storages(
    source: ByteSource,
    fetcher: EntryFetcher,
    plan: LoadPlan,
    *,
    copy: bool = False,
    verify: bool | None = None,
) -> Buffers:
    """Every storage of `plan` by entry name; zero payloads are zeros of the views' extent."""
    buffers: Buffers = {
        name: np.zeros(storage.nbytes, dtype=np.uint8)
        for name, storage in plan.storages.items()
        if storage.zeros
    }
    if isinstance(source, LocalFileSource):
        buffers.update(await asyncio.to_thread(_mapped, source, fetcher, plan, copy, verify))
    else:
        buffers.update(await _streamed(source, fetcher, plan))
    return buffers


# -- local: memory-mapped --------------------------------------------------------------------


def _mapped(
    source: LocalFileSource, fetcher: EntryFetcher, plan: LoadPlan, copy: bool, verify: bool | None
) -> Buffers:
    with open(source.location, "rb") as file:
        if file_identity(os.fstat(file.fileno())) != source.identity:
            raise SourceChanged(f"{source.location} changed since it was opened")
        if source.size == 0:
            return {}
        mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
    whole = np.frombuffer(mapping, dtype=np.uint8)
    buffers: Buffers = {}
    for rng in plan.ranges:
        for entry in rng.entries:
            start = _local_data_offset(entry, whole, fetcher.known_offsets)
            stored = whole[start : start + entry.compressed_size]
            if entry.method != METHOD_STORED:
                buffers[entry.name] = _inflate(entry, stored)
                continue
            if copy or verify:
                _check_crc(entry, stored)
            buffers[entry.name] = stored.copy() if copy else stored
    return buffers


def _local_data_offset(entry: ZipEntry, whole: np.ndarray, known: dict[str, int]) -> int:
    found = known.get(entry.name)
    if found is None:
        header = memoryview(whole[entry.header_offset : entry.region_end])
        located = zipfmt.locate_data(entry, header)
        assert not isinstance(located, zipfmt.NeedUntil)  # the whole region is in hand
        found = known[entry.name] = located
    return found


def _inflate(entry: ZipEntry, stored: np.ndarray) -> np.ndarray:
    out = np.empty(entry.size, dtype=np.uint8)
    view = memoryview(out)
    decoder = zipfmt.EntryDecoder(entry)
    for piece in decoder.feed(memoryview(stored)):
        view[decoder.produced - len(piece) : decoder.produced] = piece
    decoder.finish()
    return out


def _check_crc(entry: ZipEntry, data: np.ndarray) -> None:
    crc = zipfmt.crc32(memoryview(data))
    if crc != entry.crc32:
        raise IntegrityError(f"entry {entry.name!r}: CRC-32 {crc:08x} does not match {entry.crc32:08x}")


# -- remote: streamed ranges -----------------------------------------------------------------


async def _streamed(source: ByteSource, fetcher: EntryFetcher, plan: LoadPlan) -> Buffers:
    buffers: Buffers = {
        name: np.empty(storage.nbytes, dtype=np.uint8)
        for name, storage in plan.storages.items()
        if not storage.zeros
    }
    small = [rng for rng in plan.ranges if rng.size <= SMALL_RANGE]
    big = [rng for rng in plan.ranges if rng.size > SMALL_RANGE]
    gate = asyncio.Semaphore(SMALL_RANGES_AT_ONCE)

    async def read_small(rng: ReadRange) -> None:
        async with gate:
            await _read_range(source, fetcher, rng, buffers)

    async def read_big() -> None:
        for rng in big:
            await _read_range(source, fetcher, rng, buffers)

    try:
        async with asyncio.TaskGroup() as group:  # the first failure cancels the rest
            for rng in small:
                group.create_task(read_small(rng))
            group.create_task(read_big())
    except BaseExceptionGroup as failed:  # the caller gets the first failure itself, not a group
        raise failed.exceptions[0] from None
    return buffers


async def _read_range(source: ByteSource, fetcher: EntryFetcher, rng: ReadRange, buffers: Buffers) -> None:
    targets = [Target(entry) for entry in rng.entries]
    arrays = [buffers[entry.name] for entry in rng.entries]
    offsets = fetcher.known_offsets
    start, end = range_bounds(targets, offsets)
    demux = Demux(start, targets, offsets)
    copier = _Copier()
    try:
        async with aclosing(source.stream(start, end, chunk_size=STREAM_CHUNK)) as chunks:
            async for chunk in chunks:
                for index, at, piece in demux.feed(chunk):
                    await copier.copy(arrays[index], at, piece)
                if demux.done:
                    break
        demux.close()
    finally:
        await copier.drain()


class _Copier:
    """Copies received pieces into their buffers on a thread of its own (NumPy releases the GIL for
    big copies), so the event loop goes on receiving while a piece is copied and its pages are
    faulted in. At most COPIES_AHEAD pieces wait: that bounds the chunks held."""

    def __init__(self) -> None:
        self._pending: deque[asyncio.Future[None]] = deque()

    async def copy(self, array: np.ndarray, at: int, piece: bytes | memoryview) -> None:
        if len(piece) < COPY_IN_THREAD:
            memoryview(array)[at : at + len(piece)] = piece
            return
        source = np.frombuffer(piece, dtype=np.uint8)
        destination = array[at : at + len(piece)]
        loop = asyncio.get_running_loop()
        self._pending.append(loop.run_in_executor(_copy_thread(), np.copyto, destination, source))
        while len(self._pending) > COPIES_AHEAD:
            await self._pending.popleft()

    async def drain(self) -> None:
        while self._pending:
            await asyncio.shield(self._pending.popleft())


@functools.cache
def _copy_thread() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(1, thread_name_prefix="pt2serve-load-copy")
