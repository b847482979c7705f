"""One PayloadMeta (a config entry) → TensorInfo, with every field checked.

This runs once per tensor at open, so it is kept lean: shape arithmetic is
cached per (sizes, strides) (models repeat a few shapes many times), and error
messages are only formatted when something is wrong.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass

from . import layout
from .dtypes import BY_SERIALIZED, DType, dtype_from_serialized
from .errors import ArchiveFormatError
from .tensorinfo import TensorInfo, build_storage_ref, build_tensor_info
from .zipfmt import ZipEntry

CUSTOM_OBJECT_PREFIXES = ("custom_obj_", "opaque_obj_")
STRIDED_LAYOUT = 7  # torch._export.serde.schema.Layout.Strided
# No real tensor spans more than this; larger claims are corrupt (or hostile). The limit
# holds for the product of the non-zero sizes too, so numpy can always shape the result.
MAX_TENSOR_BYTES = 1 << 50
# torch and numpy both stop at 64 dimensions; more is a corrupt (or hostile) config, and
# checking it first keeps the per-dimension work bounded.
MAX_NDIM = 64

PICKLED = "pickled tensor (use_pickle: a torch.save of a tensor subclass), not raw bytes"
CUSTOM_OBJECT = "custom object (a pickled script or opaque object), not a tensor"
SYMBOLIC = "symbolic size, stride or offset (as_expr)"

_as_int = operator.itemgetter("as_int")
_INT_ONLY = frozenset({int})  # bool and float are not sizes, even where they compare equal to one


class _Symbolic(Exception):
    """A SymInt is an expression, not a number."""


@dataclass(frozen=True, slots=True)
class Geometry:
    numel: int
    dense: bool
    dim_order: tuple[int, ...]
    reach: int  # elements from the first to the last one touched (0 for empty views)
    claim: int  # the largest of: any size or stride, the product of the non-zero sizes


# Checked geometry by (sizes, strides): models repeat a few shapes many times. Keys are only
# stored after their values were checked to be ints, so equal-comparing floats or bools
# never reach a lookup (every tensor's types are checked first).
MAX_REMEMBERED_SHAPES = 4096
_GEOMETRY: dict[tuple[tuple[int, ...], tuple[int, ...]], Geometry] = {}


def geometry(sizes: tuple[int, ...], strides: tuple[int, ...]) -> Geometry:
    """Shape arithmetic for (sizes, strides); callers keep ndim <= MAX_NDIM so this stays cheap."""
    numel = math.prod(sizes)
    dense = layout.is_dense(sizes, strides)
    order = layout.dim_order(sizes, strides) if dense else tuple(range(len(sizes)))
    _, end = layout.element_extent(sizes, strides, 0)
    claim = max(max(sizes, default=0), max(strides, default=0), math.prod(s for s in sizes if s))
    return Geometry(numel, dense, order, end, claim)


def tensor_info(
    meta: object, name: str, model: str, kind: str, entries: Mapping[str, ZipEntry], folder: str, where: str
) -> TensorInfo:
    """`folder` is the archive folder of the config's payloads ("<root>/data/weights/"), where
    `path_name` is looked up in `entries`; `where` names the config for errors."""
    try:
        path_name = meta["path_name"]  # type: ignore[index]
        is_param = meta["is_param"]  # type: ignore[index]
        pickled = meta["use_pickle"]  # type: ignore[index]
        tensor_meta = meta.get("tensor_meta")  # type: ignore[union-attr]
    except (TypeError, KeyError, AttributeError):
        raise ArchiveFormatError(f"{where}: {name!r} is not a payload meta object") from None
    if type(path_name) is not str or type(is_param) is not bool or type(pickled) is not bool:
        raise ArchiveFormatError(f"{where}: {name!r} has a bad path_name, is_param or use_pickle")
    entry = entries.get(folder + path_name)
    if entry is None:
        raise ArchiveFormatError(
            f"{where}: {name!r} names payload {path_name!r}, which is not in the archive"
        )
    if tensor_meta is None or path_name.startswith(CUSTOM_OBJECT_PREFIXES):
        storage = build_storage_ref(entry.name, None, entry.size, entry.compression, entry.crc32)
        return build_tensor_info(name, model, "custom_object", None, None, None, None, None, False,
                                 None, None, None, is_param, False, pickled, None, storage,
                                 CUSTOM_OBJECT)  # fmt: skip
    if type(tensor_meta) is not dict:
        raise ArchiveFormatError(f"{where}: {name!r} has a tensor_meta that is not an object")
    serialized = tensor_meta.get("dtype")
    dtype = BY_SERIALIZED.get(serialized) if type(serialized) is int else None
    if dtype is None:
        dtype_from_serialized(serialized, f"{where}: {name!r}")  # raises, naming it
    requires_grad = tensor_meta.get("requires_grad")
    if type(requires_grad) is not bool:
        raise ArchiveFormatError(f"{where}: {name!r} has requires_grad {requires_grad!r}")
    try:  # the common case in one pass of C loops; anything odd is sorted out by _ints
        sizes = tuple(map(_as_int, tensor_meta["sizes"]))
        strides = tuple(map(_as_int, tensor_meta["strides"]))
        offset = tensor_meta["storage_offset"]["as_int"]
        if type(offset) is not int or not _INT_ONLY.issuperset(map(type, sizes + strides)):
            raise ValueError
    except (TypeError, KeyError, ValueError):
        try:
            sizes = _ints(tensor_meta.get("sizes"))
            strides = _ints(tensor_meta.get("strides"))
            (offset,) = _ints([tensor_meta.get("storage_offset")])
        except _Symbolic:
            return _symbolic_info(name, model, kind, dtype, is_param, requires_grad, pickled, entry)
        except (TypeError, KeyError, ValueError, AttributeError):
            raise ArchiveFormatError(
                f"{where}: {name!r} needs sizes, strides and storage_offset as non-negative {{'as_int': N}}"
            ) from None
    shape = _GEOMETRY.get((sizes, strides)) or _checked_geometry(sizes, strides, f"{where}: {name!r}")
    if shape.claim * dtype.itemsize > MAX_TENSOR_BYTES or not 0 <= offset <= MAX_TENSOR_BYTES:
        if offset < 0:
            raise ArchiveFormatError(f"{where}: {name!r} has storage_offset {offset}")
        raise ArchiveFormatError(f"{where}: {name!r} claims more than {MAX_TENSOR_BYTES} bytes or elements")
    unsupported = None
    byte_offset = None
    if pickled:
        unsupported = PICKLED
    elif tensor_meta.get("layout", STRIDED_LAYOUT) != STRIDED_LAYOUT:
        unsupported = f"layout {tensor_meta.get('layout')!r} is not strided"
    else:
        byte_offset = offset * dtype.itemsize
        view_end = byte_offset + shape.reach * dtype.itemsize if shape.numel else 0
        if entry.size and (view_end > entry.size or entry.size % dtype.itemsize):
            _raise_out_of_bounds(shape, offset, dtype, entry, f"{where}: {name!r}", sizes, strides)
    storage = build_storage_ref(entry.name, byte_offset, entry.size, entry.compression, entry.crc32)
    return build_tensor_info(name, model, kind, dtype.name, sizes, strides, offset, shape.dim_order,
                             shape.dense, shape.numel, dtype.itemsize, shape.numel * dtype.itemsize,
                             is_param, requires_grad, pickled, dtype.executorch_scalar_type, storage,
                             unsupported)  # fmt: skip


def _checked_geometry(sizes: tuple[int, ...], strides: tuple[int, ...], where: str) -> Geometry:
    """Check a (sizes, strides) pair seen for the first time, and remember its geometry."""
    if len(sizes) != len(strides):
        raise ArchiveFormatError(f"{where} has {len(sizes)} sizes but {len(strides)} strides")
    if len(sizes) > MAX_NDIM:
        raise ArchiveFormatError(f"{where} has {len(sizes)} dimensions (at most {MAX_NDIM})")
    if min(sizes, default=0) < 0 or min(strides, default=0) < 0:
        raise ArchiveFormatError(
            f"{where} needs sizes, strides and storage_offset as non-negative {{'as_int': N}}"
        )
    shape = geometry(sizes, strides)
    if len(_GEOMETRY) >= MAX_REMEMBERED_SHAPES:
        _GEOMETRY.clear()
    _GEOMETRY[sizes, strides] = shape
    return shape


def _ints(values: object) -> tuple[int, ...]:
    """Concrete ints from SymInt JSON ([{"as_int": N}, ...]); _Symbolic for any as_expr."""
    if type(values) is not list:
        raise TypeError
    numbers = []
    for value in values:
        try:
            number = value["as_int"]
        except KeyError:
            if type(value) is dict and "as_expr" in value:
                raise _Symbolic from None
            raise
        if type(number) is not int or number < 0:
            raise ValueError
        numbers.append(number)
    return tuple(numbers)


def _symbolic_info(
    name: str, model: str, kind: str, dtype: DType, is_param: bool, requires_grad: bool,
    pickled: bool, entry: ZipEntry,
) -> TensorInfo:  # fmt: skip
    storage = build_storage_ref(entry.name, None, entry.size, entry.compression, entry.crc32)
    return build_tensor_info(name, model, kind, dtype.name, None, None, None, None, False, None,
                             dtype.itemsize, None, is_param, requires_grad, pickled,
                             dtype.executorch_scalar_type, storage, SYMBOLIC)  # fmt: skip


def _raise_out_of_bounds(
    shape: Geometry, offset: int, dtype: DType, entry: ZipEntry, where: str,
    sizes: tuple[int, ...], strides: tuple[int, ...],
) -> None:  # fmt: skip
    """A view must lie inside its payload (a zero-byte payload means zeros, as torch loads it)."""
    if entry.size % dtype.itemsize:
        raise ArchiveFormatError(
            f"{where}: payload {entry.name!r} has {entry.size} bytes, not a multiple of {dtype.itemsize}"
        )
    end = (offset + shape.reach) * dtype.itemsize if shape.numel else 0
    if end > entry.size:
        raise ArchiveFormatError(
            f"{where}: view (sizes {list(sizes)}, strides {list(strides)}, offset {offset}) reaches "
            f"byte {end} of the {entry.size}-byte payload {entry.name!r}"
        )
