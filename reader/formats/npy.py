"""`.npy` headers (format version 1.0) for tensors streamed as row-major bytes.

numpy has no bfloat16, float8 or complex32; those are written with a documented
fallback of the same bytes so `numpy.load` always works:
bfloat16 → '<u2' (raw bits: `.view(ml_dtypes.bfloat16)`), float8 kinds → '|u1'
(raw bits), complex32 → '<f2' with a trailing dimension of 2 (real, imaginary).
The real dtype is in the X-Tensor-Dtype response header.
"""

from __future__ import annotations

from ..bodies.tensor import TensorBytes
from ..pt2.tensorinfo import TensorInfo
from .body import BytesBody, ConcatBody

MAGIC = b"\x93NUMPY\x01\x00"

_DESCR = {
    "bool": "|b1",
    "uint8": "|u1",
    "int8": "|i1",
    "int16": "<i2",
    "uint16": "<u2",
    "int32": "<i4",
    "uint32": "<u4",
    "int64": "<i8",
    "uint64": "<u8",
    "float16": "<f2",
    "float32": "<f4",
    "float64": "<f8",
    "complex64": "<c8",
    "complex128": "<c16",
    # fallbacks: the same bytes under a dtype numpy knows
    "bfloat16": "<u2",
    "complex32": "<f2",
}


def npy_descr(dtype: str) -> str:
    return _DESCR.get(dtype, "|u1" if dtype.startswith("float8") else "")


def npy_header(info: TensorInfo) -> bytes:
    """The header that precedes the tensor's row-major bytes in an .npy file."""
    geometry = info.geometry
    shape = geometry.sizes
    descr = npy_descr(geometry.dtype)
    if geometry.dtype == "complex32":
        shape = (*shape, 2)
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    # pad with spaces so the data starts 64-byte aligned; the header ends with a newline
    unpadded = len(MAGIC) + 2 + len(text) + 1
    text += " " * (-unpadded % 64) + "\n"
    return MAGIC + len(text).to_bytes(2, "little") + text.encode("latin-1")


def npy_body(tensor: TensorBytes) -> ConcatBody:
    """An .npy file of a tensor read row-major."""
    if tensor.order != "contiguous":
        raise ValueError(".npy files hold row-major bytes: read the tensor with order='contiguous'")
    return ConcatBody([BytesBody(npy_header(tensor.info)), tensor])


__all__ = [
    "npy_body",
    "npy_descr",
    "npy_header",
]
