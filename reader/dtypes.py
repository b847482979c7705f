"""The dtype table: torch's serialized ScalarType → name, item size, ExecuTorch value, numpy dtype.

Serialized values come from torch._export.serde.schema.ScalarType (torch 2.13);
ExecuTorch values are c10's ScalarType numbering, which ExecuTorch mirrors.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .errors import ArchiveFormatError


@dataclass(frozen=True, slots=True)
class DType:
    serialized: int  # torch._export.serde.schema.ScalarType
    name: str  # torch's name, without "torch."
    itemsize: int
    executorch_scalar_type: int  # c10 / ExecuTorch ScalarType
    numpy: np.dtype  # what read_numpy returns (see NUMPY_UPCAST)


def _dtype(serialized: int, name: str, itemsize: int, executorch: int, numpy_dtype: object) -> DType:
    return DType(serialized, name, itemsize, executorch, np.dtype(numpy_dtype))


_TABLE = (
    _dtype(1, "uint8", 1, 0, np.uint8),
    _dtype(2, "int8", 1, 1, np.int8),
    _dtype(3, "int16", 2, 2, np.int16),
    _dtype(4, "int32", 4, 3, np.int32),
    _dtype(5, "int64", 8, 4, np.int64),
    _dtype(6, "float16", 2, 5, np.float16),
    _dtype(7, "float32", 4, 6, np.float32),
    _dtype(8, "float64", 8, 7, np.float64),
    # numpy has no complex32: read_numpy widens it to complex64 (exact).
    _dtype(9, "complex32", 4, 8, np.complex64),
    _dtype(10, "complex64", 8, 9, np.complex64),
    _dtype(11, "complex128", 16, 10, np.complex128),
    _dtype(12, "bool", 1, 11, np.bool_),
    _dtype(13, "bfloat16", 2, 15, ml_dtypes.bfloat16),
    _dtype(28, "uint16", 2, 27, np.uint16),
    _dtype(29, "float8_e4m3fn", 1, 24, ml_dtypes.float8_e4m3fn),
    _dtype(30, "float8_e5m2", 1, 23, ml_dtypes.float8_e5m2),
    _dtype(31, "float8_e4m3fnuz", 1, 26, ml_dtypes.float8_e4m3fnuz),
    _dtype(32, "float8_e5m2fnuz", 1, 25, ml_dtypes.float8_e5m2fnuz),
    _dtype(33, "float8_e8m0fnu", 1, 44, ml_dtypes.float8_e8m0fnu),
    _dtype(34, "uint32", 4, 28, np.uint32),
    _dtype(35, "uint64", 8, 29, np.uint64),
)

BY_SERIALIZED: dict[int, DType] = {d.serialized: d for d in _TABLE}
BY_NAME: dict[str, DType] = {d.name: d for d in _TABLE}

# dtypes whose numpy form is not their byte layout: read_numpy converts them.
NUMPY_UPCAST = {"complex32"}


def dtype_from_serialized(value: object, where: str) -> DType:
    """Look up a serialized ScalarType, raising ArchiveFormatError for unknown values."""
    if isinstance(value, bool) or not isinstance(value, int) or value not in BY_SERIALIZED:
        raise ArchiveFormatError(f"{where}: unknown dtype {value!r} (0 is UNKNOWN)")
    return BY_SERIALIZED[value]


def to_numpy(raw: bytes, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    """Row-major bytes of one tensor → ndarray with its logical shape."""
    if dtype.name == "complex32":
        halves = np.frombuffer(raw, dtype=np.float16).astype(np.float32)
        return (halves[0::2] + 1j * halves[1::2]).astype(np.complex64).reshape(shape)
    return np.frombuffer(raw, dtype=dtype.numpy).reshape(shape)
