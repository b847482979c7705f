"""safetensors headers: the 8-byte length, the JSON table, then each tensor's row-major bytes.

complex32 and complex128 have no safetensors dtype (and float8_e8m0fnu none that
loaders read); such tensors, and ones the reader cannot serve, are left out and
named in `__metadata__["pt2serve.skipped"]`.
"""

from __future__ import annotations

import json

from ..bodies.tensor import TensorBytes
from ..pt2.tensorinfo import TensorInfo
from .body import BytesBody
from .planned import PlannedBody

DTYPES = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "int16": "I16",
    "uint16": "U16",
    "int32": "I32",
    "uint32": "U32",
    "int64": "I64",
    "uint64": "U64",
    "float16": "F16",
    "bfloat16": "BF16",
    "float32": "F32",
    "float64": "F64",
    "complex64": "C64",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
    "float8_e4m3fnuz": "F8_E4M3FNUZ",
    "float8_e5m2fnuz": "F8_E5M2FNUZ",
}
# float8_e8m0fnu has a safetensors code (F8_E8M0) that the safetensors loaders of this
# generation do not read yet, so it is skipped like the complex types.


def writable(info: TensorInfo) -> bool:
    return info.readable and info.dtype in DTYPES


def safetensors_header(tensors: list[TensorInfo], metadata: dict[str, str]) -> bytes:
    """Header for `tensors` laid out back to back in the given order."""
    table: dict[str, object] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for info in tensors:
        geometry = info.geometry
        end = offset + geometry.nbytes
        table[info.name] = {
            "dtype": DTYPES[geometry.dtype],
            "shape": list(geometry.sizes),
            "data_offsets": [offset, end],
        }
        offset = end
    text = json.dumps(table, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # data starts 8-byte aligned
    return len(text).to_bytes(8, "little") + text


def safetensors_body(tensors: list[TensorBytes], metadata: dict[str, str], skipped: list[str]) -> PlannedBody:
    """A whole safetensors file: header, then each tensor's row-major bytes; `skipped` names
    the tensors that were asked for but left out."""
    if skipped:
        metadata = {**metadata, "pt2serve.skipped": ",".join(skipped)}
    header = safetensors_header([tensor.info for tensor in tensors], metadata)
    return PlannedBody([BytesBody(header), *tensors])


__all__ = [
    "safetensors_body",
    "safetensors_header",
    "writable",
]
