"""Response bodies of known length that can be streamed from any byte offset.

A tensor, an .npy file (header + tensor) and a safetensors file (header +
tensors) are all concatenations of these, so Range support is written once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing

import reader

Chunk = bytes | memoryview


class BytesBody:
    """Bytes already in memory (headers)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.length = len(data)

    async def chunks(self, start: int, end: int, chunk_size: int) -> AsyncIterator[Chunk]:
        for at in range(start, end, chunk_size):
            yield self.data[at : min(end, at + chunk_size)]


class TensorBody:
    """One tensor's bytes as `Archive.stream` gives them."""

    def __init__(self, archive: reader.Archive, info: reader.TensorInfo, order: str) -> None:
        self.archive = archive
        self.info = info
        self.order = order
        self.length = info.nbytes or 0

    async def chunks(self, start: int, end: int, chunk_size: int) -> AsyncIterator[Chunk]:
        stream = self.archive.stream(
            self.info.name,
            model=self.info.model,
            order=self.order,
            start=start,
            end=end,
            chunk_size=chunk_size,
        )
        async with aclosing(stream) as chunks:
            async for chunk in chunks:
                yield chunk


class ConcatBody:
    """Parts back to back; a range maps onto the parts it overlaps."""

    def __init__(self, parts: Sequence[BytesBody | TensorBody | ConcatBody]) -> None:
        self.parts = list(parts)
        self.length = sum(part.length for part in self.parts)

    async def chunks(self, start: int, end: int, chunk_size: int) -> AsyncIterator[Chunk]:
        offset = 0
        for part in self.parts:
            low, high = max(start - offset, 0), min(end - offset, part.length)
            if high > low:
                async with aclosing(part.chunks(low, high, chunk_size)) as chunks:
                    async for chunk in chunks:
                        yield chunk
            offset += part.length
            if offset >= end:
                return


Body = BytesBody | TensorBody | ConcatBody
