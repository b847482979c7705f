"""The globals torch.save writes for tensors and state dicts, as plain records.

`TORCH_GLOBALS` is the whole allowlist: (module, name) → what the interpreter
pushes for that GLOBAL. Nothing here imports or calls torch; the names are only
strings matched against the pickle's. Storage classes become `StorageType`
(the dtype they stand for), `_rebuild_tensor_v2` and `_rebuild_parameter*` become
Reducers that check their arguments and return a `TensorRecord`, and the
persistent ids `('storage', StorageType, key, location, numel)` become
`StorageRecord`s via `storage_from_persistent_id`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..deadline import NO_DEADLINE, Deadline
from .errors import MalformedPickle
from .limits import DEFAULT_LIMITS, Limits
from .machine import SAFE_KEYS, OrderedDictValue, Reducer, is_safe_key, load

MAX_DIMS = 64  # torch's own bound on a tensor's dimensions

# torch.<Name>Storage → dtype name (torch's own name, as reader.pt2.dtypes spells it).
STORAGE_DTYPES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128",
}
UNTYPED_STORAGE = "UntypedStorage"

# torch dtypes that can appear as values (torch.float16 in a config dict, or as
# the dtype of a storage pickled as UntypedStorage in newer formats).
DTYPE_NAMES = (
    "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex32",
    "complex64", "complex128", "bool", "bfloat16", "uint16", "uint32", "uint64", "float8_e4m3fn",
    "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "half", "float",
    "double", "long", "int", "short", "cfloat", "cdouble", "chalf",
)  # fmt: skip
DTYPE_ALIASES = {"half": "float16", "float": "float32", "double": "float64", "long": "int64",
                 "int": "int32", "short": "int16", "cfloat": "complex64", "cdouble": "complex128",
                 "chalf": "complex32"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class StorageType:
    """A storage class named by a GLOBAL: its dtype (None for UntypedStorage: bytes)."""

    name: str
    dtype: str | None


@dataclass(frozen=True, slots=True)
class DTypeValue:
    """A torch.dtype value, e.g. torch.float16 stored in a config."""

    name: str


@dataclass(frozen=True, slots=True)
class DeviceValue:
    """A torch.device value."""

    spec: str


@dataclass(frozen=True, slots=True)
class StorageRecord:
    """One storage a persistent id names: `data/<key>` holds numel * itemsize bytes."""

    key: str
    dtype: str
    location: str
    numel: int


@dataclass(frozen=True, slots=True)
class TensorRecord:
    """What _rebuild_tensor_v2/v3 (and _rebuild_parameter around them) describe: a strided
    view of `storage` as `dtype`, offset and strides counted in elements of `dtype`."""

    storage: StorageRecord
    dtype: str
    storage_offset: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    requires_grad: bool
    is_param: bool = False
    metadata: Any = None  # torch's per-tensor metadata dict (conj/neg bits, ...), if any


def _is_int(value: Any) -> bool:
    return type(value) is int


def _int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if type(value) in (tuple, list) and len(value) > MAX_DIMS:
        raise MalformedPickle(f"_rebuild_tensor_v2: {what} has {len(value)} dimensions (at most {MAX_DIMS})")
    if type(value) not in (tuple, list) or not all(map(_is_int, value)):
        raise MalformedPickle(f"_rebuild_tensor_v2: {what} must be a tuple of ints, not {_short(value)}")
    return tuple(value)


def _short(value: Any) -> str:
    text = repr(value) if type(value) in (int, float, bool, str, type(None)) else type(value).__name__
    return text if len(text) <= 80 else text[:80] + "..."


def _rebuild_tensor_v2(args: tuple) -> TensorRecord:
    """(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])"""
    if not 6 <= len(args) <= 7:
        raise MalformedPickle(f"_rebuild_tensor_v2 takes 6 or 7 arguments, got {len(args)}")
    storage = args[0]
    if type(storage) is not StorageRecord:
        raise MalformedPickle(f"_rebuild_tensor_v2: storage is a {_short(storage)}, not a storage")
    return _tensor(storage.dtype, *args[:6], args[6] if len(args) == 7 else None)


def _rebuild_tensor_v3(args: tuple) -> TensorRecord:
    """(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype[, metadata]):
    torch.save's form for dtypes without a typed storage class (float8, uint16, ...)."""
    if not 7 <= len(args) <= 8:
        raise MalformedPickle(f"_rebuild_tensor_v3 takes 7 or 8 arguments, got {len(args)}")
    if type(args[6]) is not DTypeValue:
        raise MalformedPickle(f"_rebuild_tensor_v3: dtype is a {_short(args[6])}, not a torch dtype")
    return _tensor(args[6].name, *args[:6], args[7] if len(args) == 8 else None)


def _tensor(
    dtype: str, storage: Any, offset: Any, sizes: Any, strides: Any, requires_grad: Any, _hooks: Any,
    metadata: Any,
) -> TensorRecord:  # fmt: skip
    if type(storage) is not StorageRecord:
        raise MalformedPickle(f"tensor: storage is a {_short(storage)}, not a storage")
    if not _is_int(offset) or offset < 0:
        raise MalformedPickle(f"tensor: storage offset {_short(offset)} is not an int >= 0")
    sizes_t = _int_tuple(sizes, "size")
    strides_t = _int_tuple(strides, "stride")
    if len(sizes_t) != len(strides_t):
        raise MalformedPickle(f"tensor: {len(sizes_t)} sizes but {len(strides_t)} strides")
    if any(size < 0 for size in sizes_t) or any(stride < 0 for stride in strides_t):
        raise MalformedPickle("tensor: negative size or stride")
    if type(requires_grad) is not bool:
        raise MalformedPickle("tensor: requires_grad is not a bool")
    return TensorRecord(storage, dtype, offset, sizes_t, strides_t, requires_grad, False, metadata or None)


def _rebuild_parameter(args: tuple) -> TensorRecord:
    if len(args) not in (3, 4):
        raise MalformedPickle(f"_rebuild_parameter takes 3 or 4 arguments, got {len(args)}")
    data, requires_grad = args[0], args[1]
    if type(data) is not TensorRecord or type(requires_grad) is not bool:
        raise MalformedPickle("_rebuild_parameter needs a tensor and a bool")
    return TensorRecord(data.storage, data.dtype, data.storage_offset, data.sizes, data.strides,
                        requires_grad, True, data.metadata)  # fmt: skip


def _ordered_dict(args: tuple) -> OrderedDictValue:
    result = OrderedDictValue()
    if args == ():
        return result
    if len(args) == 1 and type(args[0]) is list:
        for pair in args[0]:
            if type(pair) not in (tuple, list) or len(pair) != 2:
                raise MalformedPickle("OrderedDict items must be pairs")
            key = pair[0]
            if not is_safe_key(key):  # the machine's rule for every key it hashes
                raise MalformedPickle(f"OrderedDict key is a {type(key).__name__} (only {SAFE_KEYS})")
            result[key] = pair[1]
        return result
    raise MalformedPickle("OrderedDict() takes no arguments or one list of pairs here")


def _size(args: tuple) -> tuple[int, ...]:
    if len(args) != 1:
        raise MalformedPickle("torch.Size takes one tuple")
    return _int_tuple(args[0], "torch.Size")


def _device(args: tuple) -> DeviceValue:
    if not 1 <= len(args) <= 2 or type(args[0]) is not str:
        raise MalformedPickle("torch.device takes a string (and an index)")
    index = args[1] if len(args) == 2 else None
    if index is not None and not _is_int(index):
        raise MalformedPickle("torch.device index is not an int")
    return DeviceValue(args[0] if index is None else f"{args[0]}:{index}")


def storage_from_persistent_id(pid: Any) -> StorageRecord:
    """torch.save's persistent id for a storage: ('storage', StorageType, key, location, numel)."""
    if type(pid) is not tuple or len(pid) != 5 or pid[0] != "storage":
        raise MalformedPickle(f"persistent id is not a torch storage reference: {_short(pid)}")
    _, storage_type, key, location, numel = pid
    if type(storage_type) is not StorageType:
        raise MalformedPickle(f"persistent id names storage type {_short(storage_type)}")
    if type(key) is not str or not key or type(location) is not str or not _is_int(numel) or numel < 0:
        raise MalformedPickle("persistent id needs a key, a location and a storage size")
    return StorageRecord(key, storage_type.dtype or "uint8", location, numel)


def _table() -> dict[tuple[str, str], Any]:
    table: dict[tuple[str, str], Any] = {
        ("torch._utils", "_rebuild_tensor_v2"): Reducer(
            "torch._utils._rebuild_tensor_v2", _rebuild_tensor_v2
        ),
        ("torch._utils", "_rebuild_tensor_v3"): Reducer(
            "torch._utils._rebuild_tensor_v3", _rebuild_tensor_v3
        ),
        ("torch._utils", "_rebuild_parameter"): Reducer(
            "torch._utils._rebuild_parameter", _rebuild_parameter
        ),
        ("torch._utils", "_rebuild_parameter_with_state"): Reducer(
            "torch._utils._rebuild_parameter_with_state", _rebuild_parameter
        ),
        ("collections", "OrderedDict"): Reducer("collections.OrderedDict", _ordered_dict),
        ("torch", "Size"): Reducer("torch.Size", _size),
        ("torch", "device"): Reducer("torch.device", _device),
        ("torch", UNTYPED_STORAGE): StorageType(UNTYPED_STORAGE, None),
        ("torch.storage", UNTYPED_STORAGE): StorageType(UNTYPED_STORAGE, None),
    }
    for name, dtype in STORAGE_DTYPES.items():
        table["torch", name] = StorageType(name, dtype)
    for name in DTYPE_NAMES:
        table["torch", name] = DTypeValue(DTYPE_ALIASES.get(name, name))
    return table


TORCH_GLOBALS: dict[tuple[str, str], Any] = _table()


def load_torch_pickle(
    data: bytes | memoryview, where: str, limits: Limits = DEFAULT_LIMITS, deadline: Deadline = NO_DEADLINE
) -> Any:
    """The object a torch.save pickle describes, as plain data and records.

    Storages are shared by key as torch.load shares them: the first persistent id
    naming a key fixes its dtype and size. Past `deadline` it stops (ParseTimeout).
    """
    storages: dict[str, StorageRecord] = {}

    def persistent_load(pid: Any) -> StorageRecord:
        record = storage_from_persistent_id(pid)
        return storages.setdefault(record.key, record)

    return load(data, TORCH_GLOBALS, persistent_load, limits, where, deadline)
