"""Verified entries of a local archive: whole stored entries whose CRC-32 passed once.

A whole entry read is CRC-checked; the check costs a pass over every byte (zlib's CRC-32 runs
slower than the page cache serves a local file) and rules out handing bytes to the kernel
unread (sendfile(2)). So a local archive remembers, per opened version, the stored entries
whose whole content passed its CRC-32 while the file still had the identity it was opened with
(`Verified`). Reading such an entry again needs no CRC pass, only the identity check after the
bytes are read (`LocalFileSource.check_unchanged`: an in-place rewrite changes size or mtime,
and write(2) sets the mtime before it changes a page), so the reader's contract holds: a
changed file raises SourceChanged before the last bytes are handed out, never wrong bytes.

An entry is verified by any whole-entry read that passed its CRC (the digests the service
computes ahead ride on those reads) or by `verify_ahead`. Remote archives and DEFLATE entries
are never verified here: their bytes are always checked as they come.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import TYPE_CHECKING, Protocol

from .. import zipfmt
from ..entries.fetcher import EntryFetcher
from ..errors import ReaderError
from ..sources import LocalFileSource
from ..zipfmt import ZipEntry

if TYPE_CHECKING:
    from ..pt2.executorch import EmbeddedFile
    from ..pt2.tensorinfo import TensorInfo

Chunk = bytes | memoryview


class Verified:
    """The verified entries of one opened local archive (one fetcher, one source, one identity)."""

    def __init__(self, source: LocalFileSource) -> None:
        self.source = source
        self._names: set[str] = set()

    def __contains__(self, entry: ZipEntry) -> bool:
        return entry.name in self._names

    def __len__(self) -> int:
        return len(self._names)

    def record(self, entry: ZipEntry) -> None:
        """Entry `entry` passed its CRC-32 just now: verified, if the file is still the one opened."""
        try:
            self.source.check_unchanged()
        except ReaderError:  # changed or closed: nothing is remembered, later reads check their CRC
            return
        self._names.add(entry.name)


_by_fetcher: weakref.WeakKeyDictionary[EntryFetcher, Verified] = weakref.WeakKeyDictionary()


def verified_for(fetcher: EntryFetcher) -> Verified | None:
    """The verified entries behind `fetcher`; None for a source that is not a local file."""
    found = _by_fetcher.get(fetcher)
    if found is None and fetcher.source.local:
        found = _by_fetcher[fetcher] = Verified(fetcher.source)
    return found


def is_verified(fetcher: EntryFetcher, entry: ZipEntry) -> bool:
    found = _by_fetcher.get(fetcher)
    return found is not None and entry in found


def entry_chunks(
    fetcher: EntryFetcher, entry: ZipEntry, start: int, end: int, chunk_size: int
) -> AsyncIterator[Chunk]:
    """`fetcher.chunks(entry, start, end)`, faster where that keeps its contract: a verified entry
    streams without a CRC pass (identity checked before the last chunk), and a whole-entry
    stream of a local one that passes its CRC verifies it."""
    verified = verified_for(fetcher) if entry.method == zipfmt.structs.METHOD_STORED else None
    if verified is not None and entry in verified and start < end:
        return _unchanged_chunks(fetcher, verified.source, entry, start, end, chunk_size)
    chunks = fetcher.chunks(entry, start, end, chunk_size)
    if verified is not None and start == 0 and end == entry.size:
        return _recording(chunks, verified, entry)
    return chunks


async def entry_read_into(fetcher: EntryFetcher, entry: ZipEntry, start: int, buffer: memoryview) -> None:
    """`fetcher.read_into`, without the CRC pass for a verified entry (identity checked after the
    read); a whole entry that passes its CRC verifies it."""
    verified = verified_for(fetcher) if entry.method == zipfmt.structs.METHOD_STORED else None
    if verified is not None and entry in verified and len(buffer):
        offset = await fetcher.data_offset(entry)
        await verified.source.read_into(offset + start, buffer)
        verified.source.check_unchanged()
        return
    await fetcher.read_into(entry, start, buffer)
    if verified is not None and start == 0 and len(buffer) == entry.size:
        verified.record(entry)


async def entry_read(fetcher: EntryFetcher, entry: ZipEntry, start: int, end: int) -> bytes:
    """`fetcher.read`, without the CRC pass for a verified entry (identity checked after the read);
    a whole entry that passes its CRC verifies it."""
    verified = verified_for(fetcher) if entry.method == zipfmt.structs.METHOD_STORED else None
    if verified is not None and entry in verified and start < end:
        offset = await fetcher.data_offset(entry)
        data = await verified.source.read(offset + start, offset + end)
        verified.source.check_unchanged()
        return data
    data = await fetcher.read(entry, start, end)
    if verified is not None and start == 0 and end == entry.size:
        verified.record(entry)
    return data


class _OneEntry(Protocol):
    """A tensor's or a file's bytes (TensorBytes, EntryBytes): the entry and who reads it."""

    entry: ZipEntry
    fetcher: EntryFetcher


class Verifiable(Protocol):
    """What `verify_ahead` goes through (an Archive; named structurally: the archive imports this)."""

    @property
    def executorch_files(self) -> list[EmbeddedFile]: ...

    def tensors(self, model: str | None = None) -> list[TensorInfo]: ...

    def tensor(self, name: str, model: str | None = None) -> _OneEntry: ...

    def executorch_file(self, name: str) -> _OneEntry: ...


async def verify_ahead(archive: Verifiable) -> int:
    """CRC-check every stored payload entry of a local archive not yet verified (a background job:
    one pass over the file, entry by entry); returns how many entries are verified."""
    entries: dict[str, tuple[EntryFetcher, ZipEntry]] = {}
    for info in archive.tensors():
        if info.readable:
            tensor = archive.tensor(info.name, model=info.model)
            entries.setdefault(tensor.entry.name, (tensor.fetcher, tensor.entry))
    for file in archive.executorch_files:
        program = archive.executorch_file(file.name)
        entries.setdefault(program.entry.name, (program.fetcher, program.entry))
    count = 0
    for fetcher, entry in entries.values():
        verified = verified_for(fetcher)
        if verified is None or entry.method != zipfmt.structs.METHOD_STORED or not entry.size:
            continue
        if entry not in verified:
            async with aclosing(entry_chunks(fetcher, entry, 0, entry.size, fetcher.chunk_size)) as chunks:
                async for _ in chunks:
                    pass
        count += entry in verified
    return count


async def _recording(
    chunks: AsyncIterator[Chunk], verified: Verified, entry: ZipEntry
) -> AsyncIterator[Chunk]:
    """The chunks of a whole-entry stream (which checks the CRC before its last chunk); the entry
    is verified once they all went through."""
    async with aclosing(chunks) as pieces:  # type: ignore[type-var]
        async for chunk in pieces:
            yield chunk
    verified.record(entry)


async def _unchanged_chunks(
    fetcher: EntryFetcher, source: LocalFileSource, entry: ZipEntry, start: int, end: int, chunk_size: int
) -> AsyncIterator[Chunk]:
    """Bytes of a verified entry, the last chunk held back until the file is checked unchanged."""
    offset = await fetcher.data_offset(entry)
    held: Chunk | None = None
    async with aclosing(source.stream(offset + start, offset + end, chunk_size=chunk_size)) as pieces:
        async for chunk in pieces:
            if held is not None:
                yield held
            held = chunk
    source.check_unchanged()
    if held is not None:
        yield held


__all__ = [
    "verify_ahead",
]
