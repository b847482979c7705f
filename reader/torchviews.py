"""torch tensors over the NumPy buffers a load or a read fills: one untyped storage a buffer, and a
tensor with a TensorInfo's dtype, sizes, strides and storage offset on it (no copy)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .pt2.dtypes import dtype_of
from .pt2.tensorinfo import TensorInfo

if TYPE_CHECKING:
    import torch as _torch


def storage_of(torch: Any, buffer: np.ndarray) -> _torch.UntypedStorage:
    """The buffer's bytes as an untyped storage, sharing its memory."""
    if not buffer.nbytes:
        return torch.UntypedStorage(0)
    return torch.frombuffer(buffer, dtype=torch.uint8).untyped_storage()


def tensor_on(torch: Any, info: TensorInfo, storage: _torch.UntypedStorage) -> _torch.Tensor:
    """`info`'s tensor viewing `storage`, with the archive's dtype, sizes, strides and offset."""
    geometry = info.geometry
    return torch.empty(0, dtype=dtype_of(geometry.dtype).torch).set_(
        storage, geometry.storage_offset, geometry.sizes, geometry.strides
    )
