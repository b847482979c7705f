"""SliceBytes: one slice of one tensor, reading only the byte runs it covers.

`reader.pt2.slicing` plans the runs (sans-IO); this reads them through the archive's
`EntryFetcher` as one batch (`read_many`: runs lying close together come in one request,
groups in parallel) and builds the slice's row-major bytes. A slice that is one run of its
storage in row-major order (a dim-0 block of a row-major tensor) streams straight from the
source, like a whole tensor does; any other is gathered a chunk at a time (reader.bodies.gathered),
so a Range of a slice builds only the bytes it sends.

What is checked: every read is exactly as long as asked and the entry's local header is checked
against the central directory before its data offset is trusted, as every partial read of an
entry is (`TensorBytes.chunks(start, end)`). The entry's CRC-32 covers the whole entry, so it is
verified only when a slice's runs are the whole entry; a partial read cannot be CRC-checked.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

from ..errors import UnsupportedPayload
from ..pt2 import strided
from ..pt2.slicing import SlicePlan, assemble, normalize_index, plan_slice
from ..pt2.tensorinfo import TensorInfo
from .gathered import Gathered, fetch_runs, zero_chunks
from .tensor import MAX_UNBACKED_OUTPUT, TensorBytes


class SliceBytes:
    """`full[index]` of a tensor as a body: `length`, `read()`, `chunks(start, end, chunk_size)`.

    `info` describes the slice as a row-major tensor of its own (its sizes are the slice's shape;
    name, dtype and storage are the tensor's); `plan` is what it reads; `key` is the canonical
    text of the index (equal selections have equal keys).
    """

    order = "contiguous"  # a slice is always its row-major bytes

    def __init__(self, tensor: TensorBytes, index: object) -> None:
        self.tensor = tensor
        self.plan: SlicePlan = plan_slice(tensor.info, index)
        self.normalized = normalize_index(index, tensor.geometry.sizes)
        self.info = _slice_info(tensor.info, self.plan)
        self.geometry = self.info.geometry
        self.length = self.plan.nbytes
        self.key = self.plan.key
        self.dim_order = tuple(range(len(self.plan.shape)))

    @property
    def direct(self) -> bool:
        """True when the slice's bytes are one run of its storage, in order (no gathering)."""
        plan = self.plan
        if len(plan.runs) != 1 or plan.offset != 0:
            return False
        start, end = plan.runs[0]
        elements = [stride // plan.itemsize for stride in plan.strides]
        return end - start == plan.nbytes and strided.is_row_major(plan.shape, elements)

    async def read(self) -> bytes:
        """The slice's row-major bytes."""
        self._check_materializable()
        if not self.plan.runs:
            return bytes(self.length)
        runs = await self._fetch_runs()
        if self.direct:
            return bytes(runs[0])
        return assemble(self.plan, self.tensor.info, runs)

    def chunks(
        self, start: int = 0, end: int | None = None, chunk_size: int | None = None
    ) -> AsyncIterator[bytes | memoryview]:
        """Bytes [start, end) of the slice: streamed from the source when it is direct, else
        gathered a chunk at a time (reader.bodies.gathered: only the bytes asked for are built)."""
        end = self.length if end is None else end
        if not 0 <= start <= end <= self.length:
            raise ValueError(f"range [{start}, {end}) is outside this slice ({self.length} bytes)")
        fetcher = self.tensor.fetcher
        chunk_size = chunk_size or fetcher.chunk_size
        if self.direct and start < end:
            first = self.plan.runs[0][0]
            return fetcher.chunks(self.tensor.entry, first + start, first + end, chunk_size)
        if not self.plan.runs:
            return zero_chunks(start, end, chunk_size)

        async def behind() -> bytes | memoryview:
            runs = await self._fetch_runs()
            return runs[0] if len(runs) == 1 else b"".join(runs)

        gathered = Gathered(self.tensor, self.normalized, self.plan, behind, self.plan.read_bytes)
        return gathered.chunks(start, end, chunk_size)

    async def _fetch_runs(self) -> list[bytes | memoryview]:
        """The runs' bytes, in order, each exactly its run's length."""
        return await fetch_runs(self.tensor, self.plan.runs)

    def _check_materializable(self) -> None:
        """As `TensorBytes.read`: output larger than the bytes behind it (broadcast views, zero
        payloads) is only a claim, so it is capped."""
        backed = self.plan.read_bytes
        if self.length > backed and self.length > MAX_UNBACKED_OUTPUT:
            info = self.tensor.info
            raise UnsupportedPayload(
                f"{info.model}/{info.name}: a {self.length}-byte slice from {backed} bytes of payload "
                f"would have to be built in memory (limit {MAX_UNBACKED_OUTPUT})"
            )


def _slice_info(info: TensorInfo, plan: SlicePlan) -> TensorInfo:
    """The slice as a row-major tensor of the same dtype (what its headers and .npy describe)."""
    shape = plan.shape
    strides, step = [0] * len(shape), 1
    for dim in reversed(range(len(shape))):
        strides[dim] = step
        step *= max(shape[dim], 1)
    numel = plan.nbytes // plan.itemsize
    return replace(
        info,
        sizes=shape,
        strides=tuple(strides),
        dim_order=tuple(range(len(shape))),
        dense=True,
        numel=numel,
        nbytes=plan.nbytes,
    )


async def read_slice(tensor: TensorBytes, index: object) -> tuple[bytes, tuple[int, ...]]:
    """`full[index]` of a tensor: its row-major bytes and its shape."""
    sliced = SliceBytes(tensor, index)
    return await sliced.read(), sliced.plan.shape


__all__ = ["SliceBytes", "read_slice"]
