"""An entry's CRC-32 taken on a worker thread while its next bytes arrive.

A remote read receives a chunk, checks it, receives the next: done on the receiving thread, the
CRC-32 adds its time to the wire's. Handed to a worker instead (the CRC releases the GIL, as the
socket reads do), a chunk is checked while the next one arrives, and a stream costs the slower of
the two. The check still comes before the entry's last byte is released: `verify()` awaits what
is pending and raises IntegrityError, and the caller holds the last chunk until it returns.

Where the source took a piece's CRC-32 where it received it (HttpSource's receive thread), it says
so through `ByteSource.stream(checked=...)`: `RunningCrc.checked` keeps those values by archive
offset, and a chunk those pieces cover exactly is joined (`zipfmt.crc32_combine`), not read again.

Chunks are checked after they are handed on, so a consumer must not write into a chunk it was
given (none does: every source hands out buffers of their own, never reused). Chunks are batched
into `BATCH` bytes per task, so a small chunk costs no thread hop of its own; an entry's tasks are
chained (each starts from the value its predecessor returns), so they may run on any worker.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from .. import zipfmt
from ..zipfmt import ZipEntry

Known = tuple[int, int]  # a piece whose CRC-32 is already known: (crc, length)

# bytes per task on the worker: a thread hop costs about what 200 KiB of CRC-32 does, so at 1 MiB the
# hops were a fifth of the work (bench/README.md, `stream_remote.py`); an entry's last batch (under
# BATCH) is checked on the receiving thread
BATCH = 4 << 20
WORKERS = 2
KNOWN_MAX = 64  # pieces told of and not yet met: past this, those behind the next chunk are dropped

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _workers() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="pt2serve-crc")
        return _pool


def _forget_workers() -> None:
    """In a forked child: the parent's worker threads do not exist there (tasks given to their pool
    would never run), so the child starts a pool of its own on first use."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_workers)


def _chained(before: Future[int] | None, value: int, pieces: Sequence[bytes | memoryview | Known]) -> int:
    """The running CRC-32 after `pieces`, from `before`'s result (or `value` when there is none).
    A task waits for its predecessor only while that one runs: the queue hands tasks out in order."""
    if before is not None:
        value = before.result()
    for piece in pieces:
        if type(piece) is tuple:
            value = zipfmt.crc32_combine(value, piece[0], piece[1])
        else:
            value = zipfmt.crc32(piece, value)
    return value


class RunningCrc:
    """The CRC-32 of an entry's whole content, fed in order with `add`, checked with `verify`.
    `at`: the archive offset of the next byte `add` takes, once known (the entry's data offset);
    `checked` (a `ByteSource.stream` argument) is told of pieces whose CRC-32 the source took."""

    def __init__(self, entry: ZipEntry, at: int | None = None) -> None:
        self.entry = entry
        self.at = at
        self._known: dict[int, tuple[int, int]] = {}  # archive offset -> (crc, length) of a piece
        self._value = 0  # the CRC-32 so far, while no task is pending
        self._pending: Future[int] | None = None
        self._batch: list[bytes | memoryview | Known] = []
        self._batched = 0

    def add(self, data: bytes | memoryview) -> None:
        """The entry's next content bytes (kept, unmodified, until they are checked)."""
        if not len(data):
            return
        if self._pending is not None and self._pending.done():
            self._value, self._pending = self._pending.result(), None
        crc = self._known_crc(len(data))  # taken where it was received: joined, not recomputed
        if self.at is not None:
            self.at += len(data)
        if crc is not None and self._pending is None and not self._batch:
            self._value = zipfmt.crc32_combine(self._value, crc, len(data))
            return
        self._batch.append(data if crc is None else (crc, len(data)))
        self._batched += len(data)
        if self._batched >= BATCH:
            self._pending = _workers().submit(_chained, self._pending, self._value, self._batch)
            self._batch, self._batched = [], 0

    def checked(self, at: int, nbytes: int, crc: int) -> None:
        """Archive bytes [at, at + nbytes) have CRC-32 `crc` (told before the chunk holding them)."""
        if len(self._known) >= KNOWN_MAX and self.at is not None:
            self._known = {start: piece for start, piece in self._known.items() if start >= self.at}
        self._known[at] = (crc, nbytes)

    def _known_crc(self, nbytes: int) -> int | None:
        """The CRC-32 of the next `nbytes`, if pieces told of cover them exactly."""
        if not self._known or self.at is None:
            return None
        value, at, end = None, self.at, self.at + nbytes
        while at < end:
            piece = self._known.pop(at, None)
            if piece is None or at + piece[1] > end:
                return None
            value = piece[0] if value is None else zipfmt.crc32_combine(value, piece[0], piece[1])
            at += piece[1]
        return value

    async def verify(self) -> None:
        """Raise IntegrityError unless the bytes added are the entry's content (its CRC-32)."""
        value = self._value
        pending, self._pending = self._pending, None
        if pending is not None:
            value = pending.result() if pending.done() else await asyncio.wrap_future(pending)
        value = _chained(None, value, self._batch)  # what is left: under BATCH bytes, checked here
        self._batch, self._batched, self._value = [], 0, 0
        zipfmt.verify_crc(self.entry, value)


class InOrder:
    """Feeds a `RunningCrc` with the bytes of `buffer` (archive bytes from `start`) as a source reports
    them landed (`HttpSource.read_into(landed=...)`), in order: parallel parts land in any order, so a
    span past the first gap waits for the gap to fill."""

    def __init__(self, running: RunningCrc, buffer: memoryview, start: int) -> None:
        self._running = running
        self._buffer = buffer
        self._start = start
        self._next = start  # the first archive byte not yet added
        self._waiting: dict[int, int] = {}  # spans landed past the gap: start -> bytes

    def __call__(self, at: int, nbytes: int) -> None:
        self._waiting[at] = nbytes
        while self._next in self._waiting:
            size = self._waiting.pop(self._next)
            low = self._next - self._start
            self._running.add(self._buffer[low : low + size])
            self._next += size
