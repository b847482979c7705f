"""Local files: served from the page cache on the event loop, through aiofiles otherwise.

A thread hop costs more than copying a MiB out of the page cache, and a hundred
times an open(2), so the source avoids hops where the
kernel cannot block for long: the file is opened and closed inline (a read-only
descriptor; path lookup is served from the dentry cache), and each read first
tries `preadv(..., RWF_NOWAIT)`, which the kernel serves only from the page cache
and never blocks on. Whatever it could not serve goes to aiofiles' executor.
Reads are positionless (pread), so concurrent reads share one descriptor safely.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

import aiofiles.os

from ..errors import SourceChanged, SourceError
from .base import DEFAULT_CHUNK_SIZE, ByteSource, Checked, Landed, SourceStats, check_range, fresh_buffer

T = TypeVar("T")

_preadv = aiofiles.os.wrap(os.preadv)
_pread = aiofiles.os.wrap(os.pread)
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", None)
# O_NONBLOCK so that opening a FIFO (which waits for a writer) cannot stall the event
# loop: open returns at once, and fstat then refuses anything but a regular file.
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0) | _NONBLOCK

# read() serves up to this much from the page cache inline, through a scratch buffer that
# every source on the thread reuses (a fresh buffer costs page faults, more than the
# thread hop); larger reads come back from pread in the executor.
INLINE_READ_LIMIT = 1 << 20


class _Scratch(threading.local):
    """Per thread, so sources on several event loops never share it; inline reads fill and
    copy it out with no await in between, so sources on one loop can."""

    view = memoryview(bytearray())

    def take(self, length: int) -> memoryview:
        if len(self.view) < length:
            self.view = memoryview(bytearray(max(length, 256 << 10)))
        return self.view[:length]


_scratch = _Scratch()


def file_identity(status: os.stat_result) -> str:
    """What names a local file's bytes: size, modification time and inode (changes on any rewrite)."""
    return f"{status.st_size:x}-{status.st_mtime_ns:x}-{status.st_ino:x}"


class LocalFileSource(ByteSource):
    """One local file, opened once; exact reads or a typed error.

    Closing while reads wait in the executor (the service reopens an archive that
    changed while other requests stream it), or while a response sends the file's bytes
    with sendfile(2) (`held`), keeps the descriptor until they are done: a descriptor
    number closed early can be reused by another file, and a read would then hand out
    that file's bytes. Reads after close raise SourceError.
    """

    local = True
    mappable = True

    def __init__(self, path: str, fd: int, status: os.stat_result) -> None:
        self.location = path
        self._fd = fd
        self.size = status.st_size
        self.modified_ns = status.st_mtime_ns  # a validator, as a remote object's ETag is (versions.py)
        self.identity = file_identity(status)
        self.stats = SourceStats()
        self._nowait = _RWF_NOWAIT is not None
        self._closed = False
        self._holders = 0  # reads waiting in the executor (and `held` blocks), each holding the descriptor

    @classmethod
    async def open(cls, path: str | os.PathLike[str]) -> LocalFileSource:
        path = os.fspath(path)
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError as exc:
            raise SourceError(f"cannot open {path}: {exc.strerror or exc}") from None
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise SourceError(f"{path} is not a regular file")
            if _NONBLOCK:
                os.set_blocking(fd, True)  # what a regular file's reads should be everywhere
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, status)

    async def read(self, start: int, end: int, *, purpose: str = "data") -> bytes:
        check_range(self, start, end)
        self._check_open()
        length = end - start
        data = self._read_cached(start, length) if length <= INLINE_READ_LIMIT else b""
        if len(data) < length:
            data += await self._pread(start + len(data), length - len(data))
        self.stats.record(purpose, len(data))
        return data

    async def read_into(
        self, start: int, buffer: memoryview, *, purpose: str = "data", landed: Landed | None = None
    ) -> None:
        check_range(self, start, start + len(buffer))
        self._check_open()
        await self._fill(buffer, start, inline=len(buffer) <= INLINE_READ_LIMIT)
        self.stats.record(purpose, len(buffer))

    async def stream(
        self,
        start: int,
        end: int,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        purpose: str = "data",
        checked: Checked | None = None,
    ) -> AsyncIterator[memoryview]:
        check_range(self, start, end)
        if chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        for position in range(start, end, chunk_size):
            self._check_open()
            chunk = fresh_buffer(min(chunk_size, end - position))  # of its own: the consumer keeps it
            await self._fill(chunk, position)
            self.stats.record(purpose, len(chunk))
            yield chunk

    async def _fill(self, view: memoryview, start: int, *, inline: bool = True) -> None:
        """All of `view` from `start`: from the page cache inline (unless told not to: a big copy
        would hold the event loop), the rest in the executor."""
        length = len(view)
        done = self._preadv_nowait(view, start) if inline and length else 0
        try:
            while done < length:
                got = await self._executor(_preadv, [view[done:]], start + done)
                if got == 0:
                    await self._raise_short_read(start, length, done)
                done += got
        except OSError as exc:
            raise SourceError(f"reading {self.location} at {start}: {exc.strerror or exc}") from None

    def _read_cached(self, start: int, length: int) -> bytes:
        """As many of the bytes as the page cache holds (maybe none), without blocking."""
        if not self._nowait or not length:
            return b""
        view = _scratch.take(length)
        return bytes(view[: self._preadv_nowait(view, start)])

    async def _pread(self, start: int, length: int) -> bytes:
        try:
            data = await self._executor(_pread, length, start)
        except OSError as exc:
            raise SourceError(f"reading {self.location} at {start}: {exc.strerror or exc}") from None
        if len(data) != length:
            await self._raise_short_read(start, length, len(data))
        return data

    async def _executor(self, call: Callable[..., Awaitable[T]], *args: object) -> T:
        """A read that may wait on the disk, in aiofiles' executor, holding the descriptor."""
        with self.held() as fd:
            return await call(fd, *args)

    @contextlib.contextmanager
    def held(self) -> Iterator[int]:
        """The descriptor, kept open until the block ends even if the source is closed meanwhile
        (a read in the executor, or a response sending the file's bytes with sendfile(2))."""
        self._check_open()
        self._holders += 1
        try:
            yield self._fd
        finally:
            self._holders -= 1
            if self._closed and not self._holders:
                self._release()

    def check_unchanged(self) -> None:
        """Raise SourceChanged unless the opened file still has the identity it was opened with
        (an fstat of the descriptor: the very file read, even if its path now names another).
        An in-place rewrite changes its size or modification time, and write(2) sets the time
        before it changes a page: bytes read (or sent) before a check that passes are the
        opened file's."""
        self._check_open()
        try:
            now: str | None = file_identity(os.fstat(self._fd))
        except OSError:
            now = None
        if now != self.identity:
            raise SourceChanged(f"{self.location} changed since it was opened ({self.identity}, now {now})")

    def _check_open(self) -> None:
        if self._closed:
            raise SourceError(f"{self.location} is closed")

    def _preadv_nowait(self, view: memoryview, start: int) -> int:
        if not self._nowait:
            return 0
        try:
            return os.preadv(self._fd, [view], start, _RWF_NOWAIT)
        except BlockingIOError:
            return 0
        except OSError:  # the filesystem does not support RWF_NOWAIT: always use the executor
            self._nowait = False
            return 0

    async def _raise_short_read(self, start: int, wanted: int, got: int) -> None:
        try:
            now = file_identity(os.fstat(self._fd))
        except OSError:
            now = None
        if now != self.identity:
            raise SourceChanged(f"{self.location} changed while being read (was {self.identity}, now {now})")
        raise SourceError(f"short read from {self.location}: {got} of {wanted} bytes at {start}")

    def map(self) -> mmap.mmap:
        """The opened file mapped copy-on-write (writes stay in the process), checked unchanged
        first: the very file the index was read from, even if its path now names another."""
        self.check_unchanged()
        return mmap.mmap(self._fd, 0, access=mmap.ACCESS_COPY)

    async def revalidate(self) -> bool:
        """True if the file is still the one opened (same size, mtime and inode)."""
        try:
            return file_identity(os.stat(self.location)) == self.identity
        except OSError:
            return False

    async def close(self) -> None:
        """Closing a read-only descriptor never waits on the disk: done inline, once the
        executor holds no read on it."""
        self._closed = True
        if not self._holders:
            self._release()

    def _release(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
