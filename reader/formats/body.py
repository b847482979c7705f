"""Bodies: outputs of known length that can be produced from any byte offset.

A tensor (`reader.bodies.TensorBytes`), an .npy file (header + tensor) and a safetensors
file (header + tensors) are all concatenations of these, so Range support, resume
and the service's responses are written once, against this protocol.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import Protocol

Chunk = bytes | memoryview


class Body(Protocol):
    length: int

    def chunks(self, start: int, end: int, chunk_size: int) -> AsyncIterator[Chunk]:
        """Bytes [start, end) of the body, in chunks of at most chunk_size."""
        ...


class BytesBody:
    """Bytes already in memory (headers)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.length = len(data)

    async def chunks(self, start: int, end: int, chunk_size: int) -> AsyncIterator[Chunk]:
        for at in range(start, end, chunk_size):
            yield self.data[at : min(end, at + chunk_size)]


class ConcatBody:
    """Parts back to back; a range maps onto the parts it overlaps."""

    def __init__(self, parts: Sequence[Body]) -> None:
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


async def read_body(body: Body, start: int, end: int, chunk_size: int) -> bytes:
    """Bytes [start, end) of a body, joined (for small bodies and tests)."""
    async with aclosing(body.chunks(start, end, chunk_size)) as chunks:
        return b"".join([bytes(chunk) async for chunk in chunks])


__all__ = [
    "Body",
    "BytesBody",
    "Chunk",
    "ConcatBody",
    "read_body",
]
