"""TensorBytes: one tensor, read in one order, checked once.

The service, the CLI, the formats and the statistics all hold one of these
rather than a name: whether the tensor is readable, how long its output is and
how that output comes out of its payload are decided when it is made.

A dense tensor in the requested order is exactly its storage span and streams
range by range ("direct"); any other view is gathered a chunk at a time
(reader.bodies.gathered): a Range or a stream builds only the bytes it sends,
whatever size the view declares. `read()` builds the whole output.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal, get_args

import numpy as np

from .. import zipfmt
from ..entries.fetcher import EntryFetcher
from ..errors import UnsupportedPayload
from ..pt2 import gather, strided
from ..pt2.tensorinfo import TensorInfo
from ..zipfmt import ZipEntry
from .gathered import Gathered, zero_chunks
from .verified import entry_chunks, entry_read, entry_read_into

# A tensor's bytes in memory order ("default": as stored, views keep their strides) or row-major
Order = Literal["default", "contiguous"]
ORDERS: tuple[Order, ...] = get_args(Order)
# read() builds the whole output in memory. When that output is larger than the payload
# bytes behind it (a zero-byte payload, a stride-0 view), its size is only a claim, so it
# is capped; such tensors can still be streamed, or read in ranges.
MAX_UNBACKED_OUTPUT = 1 << 30
# what read_into fills: any writable C-contiguous buffer; these are the usual ones
WritableBuffer = bytearray | memoryview | np.ndarray


class TensorBytes:
    """What `Archive.tensor(name, model=..., order=...)` returns: `length`, `read()`, `read_range()`,
    `read_into()`, `chunks()`."""

    def __init__(self, info: TensorInfo, entry: ZipEntry, fetcher: EntryFetcher, order: str) -> None:
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
        self.geometry = geometry = info.geometry  # UnsupportedPayload unless readable
        sizes, strides, itemsize = geometry.sizes, geometry.strides, geometry.itemsize
        self.info = info
        self.order = order
        self.entry = entry
        self.length = geometry.nbytes
        self._fetcher = fetcher
        first, end = strided.element_extent(sizes, strides, geometry.storage_offset)
        self.span = (first * itemsize, end * itemsize)
        self.zeros = entry.size == 0
        self.direct = info.dense and (order == "default" or strided.is_row_major(sizes, strides))

    @property
    def dim_order(self) -> tuple[int, ...]:
        """The dim order of the output: the tensor's own in memory order, identity when row-major."""
        if self.order == "default":
            return self.geometry.dim_order
        return tuple(range(len(self.geometry.sizes)))

    async def archive_span(self) -> tuple[int, int]:
        """Where the output lies in the archive itself, when it is a stored run of bytes there
        (for a pread or sendfile of the same bytes); ValueError otherwise."""
        if not self.direct or self.entry.method != zipfmt.structs.METHOD_STORED or not self.needs_payload:
            raise ValueError(f"{self.info.name!r} is not a stored run of the archive's bytes in this order")
        offset = await self._fetcher.data_offset(self.entry)
        return offset + self.span[0], offset + self.span[1]

    @property
    def fetcher(self) -> EntryFetcher:
        """What reads the payload (bulk readers plan several tensors' reads through it at once)."""
        return self._fetcher

    @property
    def needs_payload(self) -> bool:
        return bool(self.length) and not self.zeros

    async def read(self) -> bytes:
        self.check_materializable()
        span = await entry_read(self._fetcher, self.entry, *self.span) if self.needs_payload else b""
        return self.finish(span)

    async def read_range(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the output in one read when the tensor is direct (one request
        remotely, one pread locally); gathered views and zeros build only these bytes."""
        self._check_range(start, end)
        if self.direct and self.needs_payload and start < end:
            first = self.span[0]
            return await entry_read(self._fetcher, self.entry, first + start, first + end)
        chunks = self._built(start, end, max(1, end - start))
        return b"".join([bytes(chunk) async for chunk in chunks])

    async def read_into(self, buffer: WritableBuffer, start: int = 0) -> None:
        """Bytes [start, start + its size) of the output into `buffer`, any writable contiguous
        buffer (a bytearray, a NumPy array): a direct tensor is read straight into it, with no
        bytes object in between; other views are gathered as `read_range` does, then copied."""
        view = memoryview(buffer).cast("B")
        if view.readonly:
            raise TypeError(f"{type(buffer).__name__} is read-only: read_into needs a writable buffer")
        end = start + len(view)
        self._check_range(start, end)
        if self.direct and self.needs_payload and start < end:
            first = self.span[0]
            await entry_read_into(self._fetcher, self.entry, first + start, view)
            return
        view[:] = await self.read_range(start, end)

    def _check_range(self, start: int, end: int) -> None:
        if not 0 <= start <= end <= self.length:
            raise ValueError(f"range [{start}, {end}) is outside {self.info.name!r} ({self.length} bytes)")

    def check_materializable(self) -> None:
        backed = 0 if self.zeros else self.span[1] - self.span[0]
        if self.length > backed and self.length > MAX_UNBACKED_OUTPUT:
            raise UnsupportedPayload(
                f"{self.info.model}/{self.info.name}: {self.length} bytes from a {backed}-byte payload "
                f"would have to be built in memory (limit {MAX_UNBACKED_OUTPUT}); stream it instead"
            )

    def finish(self, span: bytes) -> bytes:
        """The output bytes from the bytes of the view's storage span."""
        if not self.needs_payload:
            return bytes(self.length)
        if self.direct:
            return span
        geometry = self.geometry
        return strided.gather_row_major(span, geometry.itemsize, geometry.sizes, geometry.strides)

    def chunks(
        self, start: int = 0, end: int | None = None, chunk_size: int | None = None
    ) -> AsyncIterator[bytes | memoryview]:
        """Bytes [start, end) of the output, without holding the whole tensor when it is direct."""
        end = self.length if end is None else end
        self._check_range(start, end)
        chunk_size = chunk_size or self._fetcher.chunk_size
        if self.direct and self.needs_payload and start < end:
            first = self.span[0]
            return entry_chunks(self._fetcher, self.entry, first + start, first + end, chunk_size)
        return self._built(start, end, chunk_size)

    @property
    def amplified(self) -> bool:
        """Its declared output is far larger than the bytes behind it (`pt2.gather.amplified`):
        what costs time in proportion to that size is done for it on demand only."""
        return gather.amplified(self.info)

    def storage_chunks(self, chunk_size: int | None = None) -> AsyncIterator[bytes | memoryview]:
        """The bytes of storage behind the view, first element to last (none for zeros): equal
        bytes behind equal views are equal outputs, at the cost of the storage, not the view."""
        if not self.needs_payload:
            return zero_chunks(0, 0, 1)
        return entry_chunks(self._fetcher, self.entry, *self.span, chunk_size or self._fetcher.chunk_size)

    def _built(self, start: int, end: int, chunk_size: int) -> AsyncIterator[bytes | memoryview]:
        """Zeros, or a gathered view, a chunk at a time: only the bytes asked for are built."""
        if not self.needs_payload:
            return zero_chunks(start, end, chunk_size)
        normalized = tuple(range(size) for size in self.geometry.sizes)
        plan = gather.view_plan(self.geometry, self.span[0])
        span = self.span

        async def behind() -> bytes:
            return await entry_read(self._fetcher, self.entry, *span)

        return Gathered(self, normalized, plan, behind, span[1] - span[0]).chunks(start, end, chunk_size)


async def read_all(tensors: list[TensorBytes], fetcher: EntryFetcher) -> list[bytes]:
    """Several tensors' bytes; payloads lying close together in the archive come in one request."""
    for tensor in tensors:
        tensor.check_materializable()
    fetching = [tensor for tensor in tensors if tensor.needs_payload]
    spans = await fetcher.read_many([(tensor.entry, *tensor.span) for tensor in fetching])
    found = dict(zip(map(id, fetching), spans))
    return [tensor.finish(found.get(id(tensor), b"")) for tensor in tensors]


__all__ = ["ORDERS", "Order", "TensorBytes", "WritableBuffer", "read_all"]
