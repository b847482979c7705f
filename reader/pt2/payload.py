"""One PayloadMeta (a config entry, already type-checked by payload_schema) → TensorInfo.

What types cannot say is checked here: the dtype is known, the payload exists,
sizes and strides agree, the view lies inside its payload. This runs once per
tensor at open, so it is kept lean: shape arithmetic is cached per (sizes,
strides) (models repeat a few shapes many times), and error messages are only
formatted when something is wrong.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ArchiveFormatError
from ..zipfmt import ZipEntry
from . import strided
from .dtypes import BY_SERIALIZED, DType, dtype_from_serialized
from .schema import MAX_TENSOR_BYTES, STRIDED_LAYOUT, PayloadMeta, TensorMeta
from .tensorinfo import TensorInfo, build_storage_ref, build_tensor_info

CUSTOM_OBJECT_PREFIXES = ("custom_obj_", "opaque_obj_")

PICKLED = "pickled tensor (use_pickle: a torch.save of a tensor subclass), not raw bytes"
CUSTOM_OBJECT = "custom object (a pickled script or opaque object), not a tensor"
SYMBOLIC = "symbolic size, stride or offset (as_expr)"

_as_int = operator.attrgetter("as_int")


class _NotConcrete(Exception):
    """A size, stride or offset has no as_int."""


@dataclass(frozen=True, slots=True)
class Geometry:
    numel: int
    dense: bool
    dim_order: tuple[int, ...]
    reach: int  # elements from the first to the last one touched (0 for empty views)
    claim: int  # the largest of: any size or stride, the product of the non-zero sizes


# Checked geometry by (sizes, strides). Only all-int keys are stored, so a lookup that
# hits needs no further checks; anything else goes through _checked_geometry.
MAX_REMEMBERED_SHAPES = 4096
_GEOMETRY: dict[tuple[tuple[int, ...], tuple[int, ...]], Geometry] = {}


def geometry(sizes: tuple[int, ...], strides: tuple[int, ...]) -> Geometry:
    """Shape arithmetic for (sizes, strides); the schema keeps ndim <= MAX_NDIM so this stays cheap."""
    numel = math.prod(sizes)
    dense = strided.is_dense(sizes, strides)
    order = strided.dim_order(sizes, strides) if dense else tuple(range(len(sizes)))
    _, end = strided.element_extent(sizes, strides, 0)
    claim = max(max(sizes, default=0), max(strides, default=0), math.prod(s for s in sizes if s))
    return Geometry(numel, dense, order, end, claim)


def tensor_info(
    meta: PayloadMeta, name: str, model: str, kind: str, entries: Mapping[str, ZipEntry], folder: str,
    where: str,
) -> TensorInfo:  # fmt: skip
    """`folder` is the archive folder of the config's payloads ("<root>/data/weights/"), where
    `path_name` is looked up in `entries`; `where` names the config for errors."""
    path_name = meta.path_name
    entry = entries.get(folder + path_name)
    if entry is None:
        raise ArchiveFormatError(
            f"{where}: {name!r} names payload {path_name!r}, which is not in the archive"
        )
    tensor_meta = meta.tensor_meta
    if tensor_meta is None or path_name.startswith(CUSTOM_OBJECT_PREFIXES):
        storage = build_storage_ref(entry.name, None, entry.size, entry.compression, entry.crc32)
        return build_tensor_info(name, model, "custom_object", None, None, None, None, None, False,
                                 None, None, None, meta.is_param, False, meta.use_pickle, None, storage,
                                 CUSTOM_OBJECT)  # fmt: skip
    dtype = BY_SERIALIZED.get(tensor_meta.dtype) or dtype_from_serialized(
        tensor_meta.dtype, f"{where}: {name!r}"
    )
    sizes = tuple(map(_as_int, tensor_meta.sizes))
    strides = tuple(map(_as_int, tensor_meta.strides))
    offset = tensor_meta.storage_offset.as_int
    try:
        if offset is None:
            raise _NotConcrete
        shape = _GEOMETRY.get((sizes, strides)) or _checked_geometry(sizes, strides, f"{where}: {name!r}")
    except _NotConcrete:
        return _symbolic_info(name, model, kind, dtype, meta, tensor_meta, entry, where)
    itemsize = dtype.itemsize
    if shape.claim * itemsize > MAX_TENSOR_BYTES:
        raise ArchiveFormatError(f"{where}: {name!r} claims more than {MAX_TENSOR_BYTES} bytes")
    unsupported = None
    byte_offset = None
    if meta.use_pickle:
        unsupported = PICKLED
    elif tensor_meta.layout != STRIDED_LAYOUT:
        unsupported = f"layout {tensor_meta.layout} is not strided"
    else:
        byte_offset = offset * itemsize
        view_end = byte_offset + shape.reach * itemsize if shape.numel else 0
        if entry.size and (view_end > entry.size or entry.size % itemsize):
            _raise_out_of_bounds(shape, offset, dtype, entry, f"{where}: {name!r}", sizes, strides)
    storage = build_storage_ref(entry.name, byte_offset, entry.size, entry.compression, entry.crc32)
    return build_tensor_info(name, model, kind, dtype.name, sizes, strides, offset, shape.dim_order,
                             shape.dense, shape.numel, itemsize, shape.numel * itemsize, meta.is_param,
                             tensor_meta.requires_grad, meta.use_pickle, dtype.executorch_scalar_type,
                             storage, unsupported)  # fmt: skip


def _checked_geometry(sizes: tuple, strides: tuple, where: str) -> Geometry:
    """Check a (sizes, strides) pair seen for the first time, and remember its geometry."""
    if None in sizes or None in strides:
        raise _NotConcrete
    if len(sizes) != len(strides):
        raise ArchiveFormatError(f"{where} has {len(sizes)} sizes but {len(strides)} strides")
    shape = geometry(sizes, strides)
    if len(_GEOMETRY) >= MAX_REMEMBERED_SHAPES:
        _GEOMETRY.clear()
    _GEOMETRY[sizes, strides] = shape
    return shape


def _symbolic_info(
    name: str, model: str, kind: str, dtype: DType, meta: PayloadMeta, tensor_meta: TensorMeta,
    entry: ZipEntry, where: str,
) -> TensorInfo:  # fmt: skip
    """Listed but unreadable when a SymInt is an expression; a SymInt that is neither is corrupt."""
    symints = [*tensor_meta.sizes, *tensor_meta.strides, tensor_meta.storage_offset]
    if not any(len(symint.as_expr) for symint in symints):
        raise ArchiveFormatError(
            f"{where}: {name!r} needs sizes, strides and storage_offset as {{'as_int': N}}"
        )
    storage = build_storage_ref(entry.name, None, entry.size, entry.compression, entry.crc32)
    return build_tensor_info(name, model, kind, dtype.name, None, None, None, None, False, None,
                             dtype.itemsize, None, meta.is_param, tensor_meta.requires_grad,
                             meta.use_pickle, dtype.executorch_scalar_type, storage, SYMBOLIC)  # fmt: skip


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
