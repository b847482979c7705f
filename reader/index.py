"""PT2 semantics over a parsed ZIP: root folder, models, payload configs → TensorInfo.

Sans-IO like zipfmt: `plan_index` says which small entries are needed, the
caller fetches them however it likes, `build_index` turns them into TensorInfo.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from . import layout
from .dtypes import dtype_from_serialized
from .errors import ArchiveFormatError, UnsupportedPayload
from .tensorinfo import StorageRef, TensorInfo
from .zipfmt import ZipEntry

ARCHIVE_FORMAT = "archive_format"
ARCHIVE_VERSION = "archive_version"
BYTEORDER = "byteorder"
MODELS_DIR = "models/"
WEIGHTS_DIR = "data/weights/"
CONSTANTS_DIR = "data/constants/"
CUSTOM_OBJECT_PREFIXES = ("custom_obj_", "opaque_obj_")
STRIDED_LAYOUT = 7  # torch._export.serde.schema.Layout.Strided

# Configs are small JSON maps; anything bigger is not a PT2 config we should parse.
MAX_CONFIG_BYTES = 256 << 20
# No real tensor spans more than this; larger claims are corrupt (or hostile).
MAX_TENSOR_BYTES = 1 << 50


@dataclass(frozen=True, slots=True)
class ModelConfigs:
    weights: str
    constants: str | None


@dataclass(frozen=True, slots=True)
class IndexPlan:
    """What open must fetch: the metadata entries, by full archive name."""

    root: str
    models: tuple[str, ...]
    configs: Mapping[str, ModelConfigs]
    archive_format: str
    archive_version: str | None
    byteorder: str | None

    @property
    def needed(self) -> tuple[str, ...]:
        names = [self.archive_format]
        names += [name for name in (self.archive_version, self.byteorder) if name]
        for config in self.configs.values():
            names += [name for name in (config.weights, config.constants) if name]
        return tuple(names)


def plan_index(entries: Mapping[str, ZipEntry], first_entry: str) -> IndexPlan:
    """Find the root folder and models, and name the entries the index needs."""
    root, slash, _ = first_entry.partition("/")
    if not slash or not root:
        raise ArchiveFormatError(
            f"not a PT2 archive: first entry {first_entry!r} is not inside a root folder"
        )
    prefix = root + "/"
    archive_format = prefix + ARCHIVE_FORMAT
    if archive_format not in entries:
        raise ArchiveFormatError(f"not a PT2 archive: no {archive_format!r} entry")
    models_prefix = prefix + MODELS_DIR
    models = sorted(
        name[len(models_prefix) : -len(".json")]
        for name in entries
        if name.startswith(models_prefix) and name.endswith(".json")
        and "/" not in name[len(models_prefix) :] and len(name) > len(models_prefix) + 5
    )  # fmt: skip
    configs = {model: _model_configs(entries, prefix, model) for model in models}
    return IndexPlan(
        root=root,
        models=tuple(models),
        configs=configs,
        archive_format=archive_format,
        archive_version=_present(entries, prefix + ARCHIVE_VERSION),
        byteorder=_present(entries, prefix + BYTEORDER),
    )


def _present(entries: Mapping[str, ZipEntry], name: str) -> str | None:
    return name if name in entries else None


def _model_configs(entries: Mapping[str, ZipEntry], prefix: str, model: str) -> ModelConfigs:
    weights = f"{prefix}{WEIGHTS_DIR}{model}_weights_config.json"
    constants = f"{prefix}{CONSTANTS_DIR}{model}_constants_config.json"
    for legacy in (f"{prefix}{WEIGHTS_DIR}{model}.pt", f"{prefix}{CONSTANTS_DIR}{model}.pt"):
        if legacy in entries and weights not in entries:
            raise UnsupportedPayload(
                f"model {model!r} stores its weights in the legacy pickled layout ({legacy!r}); "
                "re-save it with torch.export.save from torch >= 2.7 to get raw payloads"
            )
    if weights not in entries:
        raise ArchiveFormatError(f"model {model!r} has no weights config {weights!r}")
    return ModelConfigs(weights=weights, constants=_present(entries, constants))


def build_index(
    plan: IndexPlan, entries: Mapping[str, ZipEntry], contents: Mapping[str, bytes]
) -> dict[str, dict[str, TensorInfo]]:
    """Parse the fetched metadata entries into {model: {fqn: TensorInfo}}."""
    _check_header_files(plan, contents)
    index: dict[str, dict[str, TensorInfo]] = {}
    for model in plan.models:
        configs = plan.configs[model]
        tensors: dict[str, TensorInfo] = {}
        sources = [(configs.weights, WEIGHTS_DIR, "weight")]
        if configs.constants:
            sources.append((configs.constants, CONSTANTS_DIR, "constant"))
        for config_name, directory, kind in sources:
            for fqn, meta in _payload_config(config_name, contents[config_name]).items():
                where = f"{config_name}: {fqn!r}"
                if fqn in tensors:
                    raise ArchiveFormatError(f"{where} is listed twice in model {model!r}")
                tensors[fqn] = _tensor_info(
                    meta, name=fqn, model=model, kind=kind,
                    payload_prefix=f"{plan.root}/{directory}", entries=entries, where=where,
                )  # fmt: skip
        index[model] = tensors
    return index


def _check_header_files(plan: IndexPlan, contents: Mapping[str, bytes]) -> None:
    value = contents[plan.archive_format].decode("utf-8", errors="replace").strip()
    if value != "pt2":
        raise ArchiveFormatError(f"not a PT2 archive: {plan.archive_format!r} says {value!r}, not 'pt2'")
    if plan.archive_version:
        version = contents[plan.archive_version].decode("utf-8", errors="replace").strip()
        if version != "0":
            raise ArchiveFormatError(
                f"PT2 archive version {version!r} is not supported (this reader knows version '0')"
            )
    if plan.byteorder:
        order = contents[plan.byteorder].decode("utf-8", errors="replace").strip()
        if order != "little":
            raise UnsupportedPayload(f"archive byte order is {order!r}; only little-endian is supported")


def _payload_config(name: str, raw: bytes) -> dict:
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ArchiveFormatError(f"{name}: not valid JSON ({exc})") from None
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise ArchiveFormatError(f"{name}: expected an object with a 'config' map")
    return config


def _tensor_info(
    meta: object, *, name: str, model: str, kind: str, payload_prefix: str,
    entries: Mapping[str, ZipEntry], where: str,
) -> TensorInfo:  # fmt: skip
    if not isinstance(meta, dict):
        raise ArchiveFormatError(f"{where}: payload meta must be an object")
    path_name = _field(meta, "path_name", str, where)
    is_param = _field(meta, "is_param", bool, where)
    pickled = _field(meta, "use_pickle", bool, where)
    tensor_meta = meta.get("tensor_meta")
    entry = entries.get(payload_prefix + path_name)
    if entry is None:
        raise ArchiveFormatError(f"{where}: payload {payload_prefix + path_name!r} is not in the archive")
    custom = tensor_meta is None or path_name.startswith(CUSTOM_OBJECT_PREFIXES)
    if custom:
        return _opaque_info(name, model, "custom_object", entry, is_param, pickled,
                            "custom object (a pickled script or opaque object), not a tensor")  # fmt: skip
    if not isinstance(tensor_meta, dict):
        raise ArchiveFormatError(f"{where}: tensor_meta must be an object or null")
    dtype = dtype_from_serialized(tensor_meta.get("dtype"), where)
    requires_grad = _field(tensor_meta, "requires_grad", bool, where)
    sizes = _symints(tensor_meta.get("sizes"), where, "sizes")
    strides = _symints(tensor_meta.get("strides"), where, "strides")
    offset = _symints([tensor_meta.get("storage_offset")], where, "storage_offset")
    base = dict(name=name, model=model, kind=kind, dtype=dtype.name, is_param=is_param,
                requires_grad=requires_grad, pickled=pickled, itemsize=dtype.itemsize,
                executorch_scalar_type=dtype.executorch_scalar_type)  # fmt: skip
    storage = StorageRef(entry.name, None, entry.size, entry.compression, entry.crc32)
    if sizes is None or strides is None or offset is None:
        return TensorInfo(**base, sizes=sizes, strides=strides,
                          storage_offset=None if offset is None else offset[0], dim_order=None,
                          dense=False, numel=None, nbytes=None, storage=storage,
                          unsupported="symbolic size, stride or offset (as_expr)")  # fmt: skip
    (storage_offset,) = offset
    if len(sizes) != len(strides):
        raise ArchiveFormatError(f"{where}: {len(sizes)} sizes but {len(strides)} strides")
    count = math.prod(sizes)
    if count * dtype.itemsize > MAX_TENSOR_BYTES:
        raise ArchiveFormatError(
            f"{where}: sizes {list(sizes)} claim an absurd {count * dtype.itemsize} bytes"
        )
    dense = layout.is_dense(sizes, strides)
    unsupported = None
    if pickled:
        unsupported = "pickled tensor (use_pickle: a torch.save of a tensor subclass), not raw bytes"
    elif tensor_meta.get("layout", STRIDED_LAYOUT) != STRIDED_LAYOUT:
        unsupported = f"layout {tensor_meta.get('layout')!r} is not strided"
    else:
        _check_bounds(sizes, strides, storage_offset, dtype.itemsize, entry, where)
        storage = StorageRef(entry.name, storage_offset * dtype.itemsize, entry.size,
                             entry.compression, entry.crc32)  # fmt: skip
    return TensorInfo(
        **base, sizes=sizes, strides=strides, storage_offset=storage_offset,
        dim_order=layout.dim_order(sizes, strides) if dense else tuple(range(len(sizes))),
        dense=dense, numel=count, nbytes=count * dtype.itemsize, storage=storage,
        unsupported=unsupported,
    )  # fmt: skip


def _opaque_info(
    name: str, model: str, kind: str, entry: ZipEntry, is_param: bool, pickled: bool, why: str
) -> TensorInfo:
    return TensorInfo(
        name=name, model=model, kind=kind, dtype=None, sizes=None, strides=None,
        storage_offset=None, dim_order=None, dense=False, numel=None, itemsize=None, nbytes=None,
        is_param=is_param, requires_grad=False, pickled=pickled, executorch_scalar_type=None,
        storage=StorageRef(entry.name, None, entry.size, entry.compression, entry.crc32),
        unsupported=why,
    )  # fmt: skip


def _check_bounds(
    sizes: Sequence[int], strides: Sequence[int], offset: int, itemsize: int, entry: ZipEntry, where: str
) -> None:
    """The view must lie inside its payload (a zero-byte payload means zeros, as torch loads it)."""
    if entry.size == 0:
        return
    if entry.size % itemsize:
        raise ArchiveFormatError(
            f"{where}: payload {entry.name!r} has {entry.size} bytes, not a multiple of itemsize {itemsize}"
        )
    _, end = layout.element_extent(sizes, strides, offset)
    if end * itemsize > entry.size:
        raise ArchiveFormatError(
            f"{where}: view (sizes {list(sizes)}, strides {list(strides)}, offset {offset}) reaches "
            f"byte {end * itemsize} of a {entry.size}-byte payload {entry.name!r}"
        )


def _field(meta: dict, key: str, kind: type, where: str):
    value = meta.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ArchiveFormatError(f"{where}: {key!r} must be a {kind.__name__}, got {value!r}")
    return value


def _symints(values: object, where: str, what: str) -> tuple[int, ...] | None:
    """Concrete ints from SymInt JSON ({"as_int": N}); None if any is symbolic (as_expr)."""
    if not isinstance(values, list):
        raise ArchiveFormatError(f"{where}: {what} must be a list of SymInts")
    result = []
    for value in values:
        if isinstance(value, dict) and "as_expr" in value:
            return None
        number = value.get("as_int") if isinstance(value, dict) else None
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise ArchiveFormatError(f"{where}: {what} holds {value!r}, not a non-negative as_int")
        result.append(number)
    return tuple(result)
