"""TensorInfo: everything known about one tensor without reading its bytes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from ..errors import UnsupportedPayload
from .frozen import fast_constructor


@dataclass(frozen=True, slots=True)
class StorageRef:
    """The payload entry a tensor views.

    `nbytes` is the payload's (untyped storage's) size; `offset` is where this
    tensor's first element sits in it (storage_offset * itemsize), None when the
    payload is not raw bytes (pickled tensors, custom objects).
    """

    entry: str
    offset: int | None
    nbytes: int
    compression: str
    crc32: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "entry": self.entry,
            "offset": self.offset,
            "nbytes": self.nbytes,
            "compression": self.compression,
            "crc32": self.crc32,
        }


class Geometry(NamedTuple):
    """What a readable tensor always has, every field known: what a reader uses in place of
    TensorInfo's optional fields (`TensorInfo.geometry` is the one place that checks them).

    `data_offset` is where the first element sits in the storage payload, in bytes
    (storage_offset * itemsize, TensorInfo's `storage.offset`). A NamedTuple (immutable, no
    per-instance dict) rather than a frozen dataclass: a load takes one per tensor per step, by
    the thousand, and a tuple is built several times faster.
    """

    dtype: str
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    dim_order: tuple[int, ...]
    storage_offset: int
    numel: int
    itemsize: int
    nbytes: int
    data_offset: int


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One FQN of one model: what the archive fixes about it, without reading its bytes.

    A readable tensor (`unsupported` None) has every field, and readers take them as its `geometry`
    (typed without None). The fields typed `| None` are None only where a container cannot fix
    them, and `unsupported` then says why the bytes cannot be read:

    - a custom object (a program's script or opaque object, a checkpoint's plain value): no dtype
      and no layout at all;
    - symbolic sizes, strides or offset (an exported program's `as_expr`): the dtype, `itemsize`
      and `executorch_scalar_type`, no geometry (`sizes`, `strides`, `storage_offset`, `dim_order`,
      `numel`, `nbytes`);
    - a dtype with no raw byte layout here (a checkpoint's quantized storage, say): the geometry,
      no `itemsize`, `nbytes` or `executorch_scalar_type`.

    Pickled tensors and non-strided layouts have every field but cannot be read either (their
    `storage.offset` is None: the payload is not raw bytes).
    """

    name: str
    model: str
    kind: str  # "weight" | "constant" | "custom_object"
    dtype: str | None  # None: custom objects
    sizes: tuple[int, ...] | None  # None: custom objects, symbolic sizes (so the four below)
    strides: tuple[int, ...] | None
    storage_offset: int | None
    dim_order: tuple[int, ...] | None
    dense: bool
    numel: int | None
    itemsize: int | None  # None: custom objects, dtypes with no byte layout here (so the two below)
    nbytes: int | None  # also None with symbolic sizes
    is_param: bool
    requires_grad: bool
    pickled: bool
    executorch_scalar_type: int | None
    storage: StorageRef
    unsupported: str | None = None

    @property
    def readable(self) -> bool:
        return self.unsupported is None

    @property
    def geometry(self) -> Geometry:
        """The fields a readable tensor always has, or UnsupportedPayload naming the tensor and why
        its bytes cannot be read: the one check before a reader uses them (once per read)."""
        dtype, sizes, strides, dim_order = self.dtype, self.sizes, self.strides, self.dim_order
        storage_offset, numel, itemsize, nbytes = self.storage_offset, self.numel, self.itemsize, self.nbytes
        data_offset = self.storage.offset
        if (
            self.unsupported is not None
            or dtype is None
            or sizes is None
            or strides is None
            or dim_order is None
            or storage_offset is None
            or numel is None
            or itemsize is None
            or nbytes is None
            or data_offset is None
        ):
            raise UnsupportedPayload(f"{self.model}/{self.name}: {self.unsupported or 'no strided layout'}")
        return _new_tuple(
            Geometry, (dtype, sizes, strides, dim_order, storage_offset, numel, itemsize, nbytes, data_offset)
        )

    def check_readable(self) -> None:
        """UnsupportedPayload naming the tensor and why, unless its bytes can be read (`geometry`'s
        check, for a caller that needs no field)."""
        _ = self.geometry

    def to_dict(self) -> dict[str, Any]:
        """The layout JSON the service returns for /tensors/{name}/layout."""
        sizes, strides, dim_order = self.sizes, self.strides, self.dim_order
        return {
            "name": self.name,
            "model": self.model,
            "kind": self.kind,
            "dtype": self.dtype,
            "sizes": None if sizes is None else list(sizes),
            "strides": None if strides is None else list(strides),
            "storage_offset": self.storage_offset,
            "dim_order": None if dim_order is None else list(dim_order),
            "dense": self.dense,
            "numel": self.numel,
            "itemsize": self.itemsize,
            "nbytes": self.nbytes,
            "is_param": self.is_param,
            "requires_grad": self.requires_grad,
            "pickled": self.pickled,
            "executorch_scalar_type": self.executorch_scalar_type,
            "storage": self.storage.to_dict(),
            "unsupported": self.unsupported,
        }


# The index builds these by the thousand: positional constructors that skip the
# per-field object.__setattr__ of the frozen __init__ (see reader.pt2.frozen).
build_storage_ref = fast_constructor(StorageRef)
build_tensor_info = fast_constructor(TensorInfo)
_new_tuple = tuple.__new__  # Geometry without NamedTuple's keyword-accepting __new__
