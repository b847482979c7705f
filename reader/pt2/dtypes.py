"""The dtype table: torch's serialized ScalarType → name, item size, ExecuTorch value, numpy dtype,
torch dtype. Every dtype lookup goes through it (`dtype_of`, `DType.numpy`, `DType.torch`).

Serialized values come from torch._export.serde.schema.ScalarType (torch 2.13);
ExecuTorch values are c10's ScalarType numbering, which ExecuTorch mirrors.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArchiveFormatError, UnsupportedPayload


@dataclass(frozen=True, slots=True)
class DType:
    serialized: int  # torch._export.serde.schema.ScalarType
    name: str  # torch's name, without "torch."
    itemsize: int
    executorch_scalar_type: int  # c10 / ExecuTorch ScalarType
    numpy_name: str  # what read_numpy returns: a numpy dtype name, or "ml_dtypes.<name>"

    @property
    def numpy(self) -> np.dtype:
        return _numpy_dtype(self.numpy_name)

    @property
    def torch(self) -> Any:
        """torch's dtype of this name (torch imported on first use: the reader runs without it)."""
        return _torch_dtype(self.name)


@functools.cache
def _numpy_dtype(name: str) -> np.dtype:
    """ml_dtypes takes most of a second to import, so only read_numpy of its types pays for it."""
    if name.startswith("ml_dtypes."):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name.removeprefix("ml_dtypes.")))
    return np.dtype(name)


_TABLE = (
    DType(1, "uint8", 1, 0, "uint8"),
    DType(2, "int8", 1, 1, "int8"),
    DType(3, "int16", 2, 2, "int16"),
    DType(4, "int32", 4, 3, "int32"),
    DType(5, "int64", 8, 4, "int64"),
    DType(6, "float16", 2, 5, "float16"),
    DType(7, "float32", 4, 6, "float32"),
    DType(8, "float64", 8, 7, "float64"),
    # numpy has no complex32: read_numpy widens it to complex64 (exact).
    DType(9, "complex32", 4, 8, "complex64"),
    DType(10, "complex64", 8, 9, "complex64"),
    DType(11, "complex128", 16, 10, "complex128"),
    DType(12, "bool", 1, 11, "bool"),
    DType(13, "bfloat16", 2, 15, "ml_dtypes.bfloat16"),
    DType(28, "uint16", 2, 27, "uint16"),
    DType(29, "float8_e4m3fn", 1, 24, "ml_dtypes.float8_e4m3fn"),
    DType(30, "float8_e5m2", 1, 23, "ml_dtypes.float8_e5m2"),
    DType(31, "float8_e4m3fnuz", 1, 26, "ml_dtypes.float8_e4m3fnuz"),
    DType(32, "float8_e5m2fnuz", 1, 25, "ml_dtypes.float8_e5m2fnuz"),
    DType(33, "float8_e8m0fnu", 1, 44, "ml_dtypes.float8_e8m0fnu"),
    DType(34, "uint32", 4, 28, "uint32"),
    DType(35, "uint64", 8, 29, "uint64"),
)

BY_SERIALIZED: dict[int, DType] = {d.serialized: d for d in _TABLE}
BY_NAME: dict[str, DType] = {d.name: d for d in _TABLE}


@functools.cache
def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def dtype_of(name: str | None) -> DType:
    """The table's row for a tensor's dtype name (`TensorInfo.dtype`). A readable tensor always has
    one; a dtype with no raw byte layout here (or a custom object's None) is UnsupportedPayload."""
    found = BY_NAME.get(name) if name is not None else None
    if found is None:
        raise UnsupportedPayload(f"dtype {name} has no raw byte layout here")
    return found


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


__all__ = [
    "BY_NAME",
    "DType",
    "dtype_of",
    "to_numpy",
]
