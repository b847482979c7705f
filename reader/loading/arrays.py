"""NumPy arrays that view their storage's buffer with the tensor's own layout.

Every name that views one payload gets a view of that payload's one buffer, so tied weights
and views share memory as torch's state dict shares a storage. A non-dense view keeps its
strides (`order="default"`); `order="contiguous"` copies whatever is not row-major already.
complex32 has no NumPy type: it is widened to complex64, a copy.
"""

from __future__ import annotations

import numpy as np

from ..pt2 import strided
from ..pt2.dtypes import dtype_of, to_numpy
from ..pt2.tensorinfo import TensorInfo


def view_array(info: TensorInfo, storage: np.ndarray, order: str = "default") -> np.ndarray:
    """The tensor `info` describes, as a view of `storage` (its payload's bytes) where NumPy can."""
    geometry = info.geometry
    dtype = dtype_of(geometry.dtype)
    sizes, strides = geometry.sizes, geometry.strides
    itemsize = dtype.itemsize
    offset = geometry.storage_offset * itemsize
    if dtype.name == "complex32":
        raw = np.ndarray(sizes, np.dtype(f"V{itemsize}"), storage, offset, [s * itemsize for s in strides])
        return to_numpy(np.ascontiguousarray(raw).tobytes(), dtype, sizes)
    if strided.numel(sizes) == 0:
        array = np.empty(sizes, dtype=dtype.numpy)
        array.flags.writeable = storage.flags.writeable
        return array
    array = np.ndarray(sizes, dtype.numpy, storage, offset, [s * itemsize for s in strides])
    if order == "contiguous" and not array.flags.c_contiguous:
        return np.ascontiguousarray(array)
    return array
