"""A body's bytes as what can go to a socket without a copy: runs of a local file, and the rest.

A server that can send a file's bytes with sendfile(2) asks `body_pieces` how a range of a body
is made: in-memory bytes (headers, padding), `FileRun`s (bytes of a *verified* stored entry of a
local archive, reader.bodies.verified: CRC-checked once, so they may be sent unread while the file keeps
its identity), and `Streamed` parts (everything else: read and checked as `chunks` does).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..bodies.entry import EntryBytes
from ..bodies.tensor import TensorBytes
from ..bodies.verified import is_verified
from ..sources import LocalFileSource
from .body import Body, BytesBody, ConcatBody


@dataclass(frozen=True, slots=True)
class FileRun:
    """`count` bytes of a local archive from `offset`, all of them verified."""

    source: LocalFileSource
    offset: int
    count: int


@dataclass(frozen=True, slots=True)
class Streamed:
    """Bytes [start, end) of a body that are read as its `chunks` give them."""

    body: Body
    start: int
    end: int


Piece = bytes | memoryview | FileRun | Streamed


async def body_pieces(body: Body, start: int, end: int) -> list[Piece]:
    """Bytes [start, end) of `body`, in order, as memory, file runs and streamed parts."""
    if start >= end:
        return []
    if isinstance(body, ConcatBody):  # npy, safetensors, .ptd (a local PlannedBody reads part by part)
        pieces: list[Piece] = []
        offset = 0
        for part in body.parts:
            low, high = max(start - offset, 0), min(end - offset, part.length)
            if high > low:
                pieces += await body_pieces(part, low, high)
            offset += part.length
            if offset >= end:
                break
        return pieces
    if isinstance(body, BytesBody):
        return [memoryview(body.data)[start:end]]
    run = await _file_run(body, start, end)
    return [run if run is not None else Streamed(body, start, end)]


async def _file_run(body: Body, start: int, end: int) -> FileRun | None:
    if not isinstance(body, TensorBytes | EntryBytes) or not is_verified(body.fetcher, body.entry):
        return None
    source = body.fetcher.source
    if not source.local:
        return None
    try:
        first, _ = await body.archive_span()
    except ValueError:  # a gathered view, zeros, a DEFLATE entry
        return None
    return FileRun(source, first + start, end - start)


def has_file_runs(pieces: list[Piece]) -> bool:
    return any(isinstance(piece, FileRun) for piece in pieces)


__all__ = [
    "FileRun",
    "Piece",
    "Streamed",
    "body_pieces",
    "has_file_runs",
]
