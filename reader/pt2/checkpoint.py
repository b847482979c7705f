"""torch.save checkpoints: `<root>/data.pkl` → TensorInfo per tensor, sans-IO.

A torch.save ZIP holds `<root>/data.pkl` (the pickled object, whose persistent ids
name storages), `<root>/data/<key>` (each storage's raw bytes), `byteorder` and
`version`. The pickle is interpreted by reader.pickle.machine with torch's globals
as plain records, never executed; then the object is walked: every tensor becomes
a TensorInfo named by its key path (nested dict keys and list indices joined with
".", the way state_dict keys look), every other leaf value an object entry.

The walk is a loop over an explicit stack, not a recursion, so no nesting reaches Python's
recursion limit: nesting beyond `Limits.max_depth` is a PickleLimitExceeded at any depth. Its work
is bounded by the values it visits (`max_walk`) and the characters of the names it builds
(`max_name_chars`), and it checks the open's deadline as it goes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..deadline import NO_DEADLINE, Deadline
from ..errors import ArchiveFormatError, UnsupportedPayload
from ..pickle import DEFAULT_LIMITS, Limits, PickleLimitExceeded, Reducer, load_torch_pickle
from ..pickle.torch_objects import DeviceValue, DTypeValue, StorageRecord, StorageType, TensorRecord
from ..zipfmt import ZipEntry
from .dtypes import BY_NAME
from .payload import geometry
from .schema import MAX_NDIM, MAX_TENSOR_BYTES
from .tensorinfo import TensorInfo, build_storage_ref, build_tensor_info

PICKLE = "data.pkl"
BYTEORDER = "byteorder"
STORAGE_DIR = "data/"
CHECKPOINT_MODEL = "checkpoint"  # the model name a checkpoint's tensors are listed under
ROOT_NAME = "tensor"  # the name of a top-level value that is not a container


@dataclass(frozen=True, slots=True)
class CheckpointPlan:
    """The small entries a checkpoint's index needs, by full archive name."""

    root: str
    pickle: str
    byteorder: str | None

    @property
    def needed(self) -> tuple[str, ...]:
        return (self.pickle, self.byteorder) if self.byteorder else (self.pickle,)


def plan_checkpoint(entries: Mapping[str, ZipEntry], first_entry: str) -> CheckpointPlan | None:
    """A plan if the ZIP is a torch.save checkpoint (`<root>/data.pkl`), else None."""
    root, slash, _ = first_entry.partition("/")
    if not slash or not root or f"{root}/{PICKLE}" not in entries:
        return None
    byteorder = f"{root}/{BYTEORDER}"
    return CheckpointPlan(root, f"{root}/{PICKLE}", byteorder if byteorder in entries else None)


def build_checkpoint_index(
    plan: CheckpointPlan,
    entries: Mapping[str, ZipEntry],
    contents: Mapping[str, bytes],
    limits: Limits = DEFAULT_LIMITS,
    deadline: Deadline = NO_DEADLINE,
) -> dict[str, TensorInfo]:
    """{name: TensorInfo} for every tensor and leaf value of the checkpoint's object; past
    `deadline` it stops (ParseTimeout)."""
    if plan.byteorder:
        order = bytes(contents[plan.byteorder]).decode("utf-8", errors="replace").strip()
        if order != "little":
            raise UnsupportedPayload(f"checkpoint byte order is {order!r}; only little-endian is supported")
    value = load_torch_pickle(contents[plan.pickle], plan.pickle, limits, deadline)
    walker = _Walker(plan, entries, limits, deadline)
    walker.walk(value)
    return walker.found


def storage_entry_name(root: str, key: str) -> str:
    return f"{root}/{STORAGE_DIR}{key}"


def strided_info(
    name: str, model: str, kind: str, dtype_name: str, sizes: tuple[int, ...], strides: tuple[int, ...],
    storage_offset: int, entry: ZipEntry, storage_nbytes: int, is_param: bool, requires_grad: bool,
    where: str, unsupported: str | None = None, display_entry: str | None = None,
) -> TensorInfo:  # fmt: skip
    """A TensorInfo for a strided view of a raw storage (`storage_nbytes` bytes at the start of
    `entry`), checked the way torch checks set_(): the view must lie inside the storage."""
    dtype = BY_NAME.get(dtype_name)
    if len(sizes) != len(strides) or len(sizes) > MAX_NDIM:
        raise ArchiveFormatError(
            f"{where}: {len(sizes)} sizes and {len(strides)} strides (at most {MAX_NDIM})"
        )
    if any(not 0 <= value <= MAX_TENSOR_BYTES for value in (*sizes, *strides, storage_offset)):
        raise ArchiveFormatError(f"{where}: a size, stride or offset is out of range")
    shape = geometry(sizes, strides)
    entry_name = display_entry or entry.name
    if dtype is None:
        storage = build_storage_ref(entry_name, None, storage_nbytes, entry.compression, entry.crc32)
        return build_tensor_info(name, model, kind, dtype_name, sizes, strides, storage_offset,
                                 shape.dim_order, shape.dense, shape.numel, None, None, is_param,
                                 requires_grad, False, None, storage,
                                 f"dtype {dtype_name} has no raw byte layout here")  # fmt: skip
    itemsize = dtype.itemsize
    if shape.claim * itemsize > MAX_TENSOR_BYTES:
        raise ArchiveFormatError(f"{where}: claims more than {MAX_TENSOR_BYTES} bytes")
    view_end = (storage_offset + shape.reach) * itemsize if shape.numel else 0
    if view_end > storage_nbytes:
        raise ArchiveFormatError(
            f"{where}: view (sizes {list(sizes)}, strides {list(strides)}, offset {storage_offset}) "
            f"reaches byte {view_end} of its {storage_nbytes}-byte storage {entry_name!r}"
        )
    storage = build_storage_ref(entry_name, storage_offset * itemsize, storage_nbytes, entry.compression,
                                entry.crc32)  # fmt: skip
    return build_tensor_info(name, model, kind, dtype.name, sizes, strides, storage_offset, shape.dim_order,
                             shape.dense, shape.numel, itemsize, shape.numel * itemsize, is_param,
                             requires_grad, False, dtype.executorch_scalar_type, storage,
                             unsupported)  # fmt: skip


def describe(value: Any) -> str:
    """A short description of a non-tensor value for listings and errors."""
    kind = type(value)
    if value is None or kind in (bool, int, float):
        return f"{kind.__name__} {value!r}"
    if kind is str:
        return f"str {_clip(repr(value[:61]))}"  # a string of any length costs the same
    if kind in (bytes, bytearray):
        return f"{kind.__name__} of {len(value)} bytes"
    if kind in (list, tuple, set, frozenset):
        return f"{kind.__name__} of {len(value)} items"
    if isinstance(value, dict):
        return f"dict of {len(value)} items"
    if kind is DTypeValue:
        return f"torch.{value.name}"
    if kind is DeviceValue:
        return f"torch.device({_clip(repr(value.spec[:61]))})"
    if kind is StorageType:
        return f"torch.{value.name} (a class)"
    if kind is Reducer:
        return f"{value.name} (a function)"
    return kind.__name__


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _key_text(key: Any) -> str:
    if type(key) is str:
        return key
    if type(key) is bytes:
        return key.decode("utf-8", "backslashreplace")
    return str(key)


_END = object()


@dataclass(slots=True)
class _Frame:
    """A container being walked: its items still to visit, and what its walk has found so far."""

    value: dict | list | tuple
    name: str | None  # None: the top-level value
    items: Iterator[tuple[Any, Any]]
    mark: int  # how many names were found before it
    tensors: int = 0


class _Walker:
    """Walks the unpickled object depth first, on a stack of its own, bounded by `limits.max_walk`
    visits (a DAG of shared references could otherwise take exponential time) and cut at cycles."""

    def __init__(
        self, plan: CheckpointPlan, entries: Mapping[str, ZipEntry], limits: Limits, deadline: Deadline
    ) -> None:
        self.plan = plan
        self.entries = entries
        self.deadline = deadline
        self.budget = limits.max_walk
        self.limit = limits.max_walk
        self.max_depth = limits.max_depth
        self.name_chars = limits.max_name_chars
        self.active: set[int] = set()
        self.found: dict[str, TensorInfo] = {}
        self.serials: dict[str, int] = {}  # a name found twice: the last serial given to it
        self.added: list[str] = []  # names in the order found, to take back a list's items
        pickle_entry = entries[plan.pickle]
        self.object_storage = build_storage_ref(pickle_entry.name, None, pickle_entry.size,
                                                pickle_entry.compression, pickle_entry.crc32)  # fmt: skip

    def walk(self, value: Any) -> None:
        """List `value` and everything in it."""
        frames: list[_Frame] = []
        self._visit(value, None, frames)
        while frames:
            frame = frames[-1]
            key, item = next(frame.items, (_END, None))
            if key is not _END:
                frame.tensors += self._visit(item, self._child(frame.name, key), frames)
                continue
            frames.pop()
            self.active.discard(id(frame.value))
            if not isinstance(frame.value, dict) and frame.tensors == 0:
                # a list or tuple is listed item by item only if it holds tensors, else as one object
                while len(self.added) > frame.mark:
                    del self.found[self.added.pop()]
                self._object(frame.name, describe(frame.value))
            if frames:
                frames[-1].tensors += frame.tensors

    def _child(self, name: str | None, key: Any) -> str:
        text = _key_text(key)
        child = text if name is None else f"{name}.{text}"
        self.name_chars -= len(child)
        if self.name_chars < 0:
            raise PickleLimitExceeded(f"{self.plan.pickle}: the names of its values are too long in all")
        return child

    def _visit(self, value: Any, name: str | None, frames: list[_Frame]) -> int:
        """List a leaf (returns 1 for a tensor, else 0), or push a container's frame (returns 0)."""
        self.budget -= 1
        if self.budget < 0:
            raise PickleLimitExceeded(f"{self.plan.pickle}: more than {self.limit} values to walk")
        if not self.budget & 4095:
            self.deadline.check()
        kind = type(value)
        if kind is TensorRecord:
            self._add(self._tensor(value, self._name(name)))
            return 1
        if kind is StorageRecord:
            record = TensorRecord(value, value.dtype, 0, (value.numel,), (1,), False)
            self._add(self._tensor(record, self._name(name)))
            return 1
        if isinstance(value, (dict, list, tuple)) and value:
            if len(frames) > self.max_depth:
                raise PickleLimitExceeded(
                    f"{self.plan.pickle}: containers nested deeper than {self.max_depth}"
                )
            if id(value) in self.active:
                self._object(name, "a reference back to an enclosing container")
                return 0
            self.active.add(id(value))
            items = iter(value.items()) if isinstance(value, dict) else enumerate(value)
            frames.append(_Frame(value, name, items, len(self.added)))
            return 0
        if isinstance(value, dict):  # empty dicts (an empty state dict) list nothing
            return 0
        self._object(name, describe(value))
        return 0

    @staticmethod
    def _name(name: str | None) -> str:
        return ROOT_NAME if name is None else name

    def _add(self, info: TensorInfo) -> None:
        name = info.name
        if name in self.found:  # {"a.b": x, "a": {"b": y}} both spell "a.b"
            serial = self.serials.get(name, 1)  # each serial is tried once: no rescans
            while name in self.found:
                serial += 1
                name = f"{info.name}#{serial}"
            self.serials[info.name] = serial
            info = dataclasses.replace(info, name=name)
        self.found[name] = info
        self.added.append(name)

    def _object(self, name: str | None, what: str) -> None:
        info = build_tensor_info(self._name(name), CHECKPOINT_MODEL, "custom_object", None, None, None, None,
                                 None, False, None, None, None, False, False, False, None,
                                 self.object_storage, f"not a tensor: {what}")  # fmt: skip
        self._add(info)

    def _tensor(self, record: TensorRecord, name: str) -> TensorInfo:
        storage = record.storage
        where = f"{self.plan.pickle}: {name!r}"
        entry = self.entries.get(storage_entry_name(self.plan.root, storage.key))
        if entry is None:
            raise ArchiveFormatError(
                f"{where} uses storage {storage.key!r}, but there is no entry "
                f"{storage_entry_name(self.plan.root, storage.key)!r}"
            )
        storage_dtype = BY_NAME.get(storage.dtype)
        nbytes = storage.numel * (storage_dtype.itemsize if storage_dtype else 1)
        if entry.size != nbytes:
            raise ArchiveFormatError(
                f"{where}: storage {storage.key!r} holds {storage.numel} {storage.dtype} elements "
                f"({nbytes} bytes) but its entry {entry.name!r} has {entry.size} bytes"
            )
        unsupported = None
        if record.metadata:
            unsupported = f"tensor metadata ({describe(record.metadata)}) may change how its bytes read"
        return strided_info(name, CHECKPOINT_MODEL, "weight", record.dtype, record.sizes, record.strides,
                            record.storage_offset, entry, nbytes, record.is_param, record.requires_grad,
                            where, unsupported)  # fmt: skip
