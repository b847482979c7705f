"""TensorReads: what an archive does with one tensor by name, the same for every kind of archive.

Each kind says where its tensors are (`_named`: a model's layouts by name) and builds the
`TensorBytes` of one (`tensor`); looking a name up and reading it as bytes, as a slice or as an
array follow from those, here once. What each read promises is on reader.ArchiveLike.
"""

from __future__ import annotations

import difflib
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING

from ..bodies.tensor import Order, TensorBytes, WritableBuffer
from ..bodies.tensor_slice import SliceBytes
from ..errors import TensorNotFound
from ..pt2.dtypes import dtype_of, to_numpy
from ..pt2.slicing import Index
from ..pt2.tensorinfo import TensorInfo
from .deprecated import keyword_only, warn_renamed
from .source_backed import SourceBacked

if TYPE_CHECKING:
    import numpy as np


class TensorReads(SourceBacked):
    def _named(self, model: str | None) -> tuple[str, Mapping[str, TensorInfo]]:
        """The model a call means and its tensors' layouts by name."""
        raise NotImplementedError

    def tensor(self, name: str, *, model: str | None = None, order: Order = "default") -> TensorBytes:
        raise NotImplementedError

    @keyword_only("model")
    def layout(self, name: str, *, model: str | None = None) -> TensorInfo:
        resolved, tensors = self._named(model)
        info = tensors.get(name)
        if info is None:
            close = difflib.get_close_matches(name, list(tensors), n=5, cutoff=0.6)
            hint = f"; close matches: {', '.join(close)}" if close else ""
            raise TensorNotFound(f"no tensor {name!r} in model {resolved!r}{hint}")
        return info

    @keyword_only("model", "order")
    async def read(
        self, name: str, *, model: str | None = None, order: Order = "default", index: Index | None = None
    ) -> bytes:
        if index is not None:
            return await SliceBytes(self.tensor(name, model=model, order="contiguous"), index).read()
        return await self.tensor(name, model=model, order=order).read()

    @keyword_only("model")
    async def read_numpy(
        self, name: str, *, model: str | None = None, index: Index | None = None
    ) -> np.ndarray:
        tensor = self.tensor(name, model=model, order="contiguous")
        if index is not None:
            sliced = SliceBytes(tensor, index)
            return to_numpy(await sliced.read(), dtype_of(tensor.geometry.dtype), sliced.plan.shape)
        geometry = tensor.geometry
        return to_numpy(await tensor.read(), dtype_of(geometry.dtype), geometry.sizes)

    async def read_into(
        self, name: str, buffer: WritableBuffer, model: str | None = None, order: Order = "default"
    ) -> None:
        """Deprecated: `await ar.tensor(name, model=..., order=...).read_into(buffer)`. The bytes
        `read` gives into `buffer`, a writable contiguous buffer of exactly their size."""
        warn_renamed("archive.read_into(name, buffer)", "archive.tensor(name).read_into(buffer)")
        tensor = self.tensor(name, model=model, order=order)
        size = memoryview(buffer).nbytes
        if size != tensor.length:
            raise ValueError(f"{name!r} is {tensor.length} bytes; the buffer holds {size}")
        await tensor.read_into(buffer)

    def stream(
        self,
        name: str,
        model: str | None = None,
        order: Order = "default",
        start: int = 0,
        end: int | None = None,
        chunk_size: int | None = None,
    ) -> AsyncIterator[bytes | memoryview]:
        """Deprecated: `ar.tensor(name, model=..., order=...).chunks(start, end, chunk_size)`."""
        warn_renamed("archive.stream(name)", "archive.tensor(name).chunks(start, end, chunk_size)")
        return self.tensor(name, model=model, order=order).chunks(start, end, chunk_size)
