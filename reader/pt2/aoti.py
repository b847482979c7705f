"""AOTInductor packages (`aoti_compile_and_package`), sans-IO: what is in them, and the weights
that can be read without the generated code.

An AOTI model lives in `<root>/data/aotinductor/<model>/`: a compiled `.so`, its C++ source,
metadata JSON, and its weights in one of three places:

- `pickle_weights` (`package_constants_on_disk_format="pickle_weights"`, not in the .so):
  `weights_config.json` maps each FQN to `[file, sizes, strides, storage_offset]` (no dtype);
  each `<root>/data/weights/<file>` is a complete torch.save ZIP whose data.pkl names the
  storage's dtype and whose `<root'>/data/<key>` holds the raw bytes. Readable by range.
- `binary_blob`: a `*.wrapper_weights.blob`; names, dtypes and offsets exist only in the
  generated C++.
- the default: compiled into the `.so` (between `_binary_constants_bin_start` and `_end`),
  again described only by generated C++. Inductor also inlines some small constants into
  kernel code, so those have no bytes anywhere.

Models are listed as `aoti/<model>` so they never clash with an exported program of the same
name in a `package_pt2` archive that holds both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from ..errors import ArchiveFormatError, UnsupportedPayload
from ..pickle.torch_objects import TensorRecord
from ..zipfmt import ZipEntry
from .checkpoint import PICKLE, STORAGE_DIR, strided_info
from .dtypes import BY_NAME
from .schema import MAX_NDIM, MAX_TENSOR_BYTES
from .tensorinfo import TensorInfo

AOTI_DIR = "data/aotinductor/"
WEIGHTS_CONFIG = "weights_config.json"
WEIGHTS_DIR = "data/weights/"
MODEL_PREFIX = "aoti/"
NESTED_SEPARATOR = "!/"  # "<outer entry>!/<nested entry>": how nested entries are named (entries.nested)


@dataclass(frozen=True, slots=True)
class AotiModel:
    """One AOTI model folder: its weights config (pickle_weights only) and every artifact."""

    name: str  # the folder name; listed as MODEL_PREFIX + name
    config: str | None
    artifacts: tuple[str, ...]

    @property
    def listed_name(self) -> str:
        return MODEL_PREFIX + self.name

    @property
    def weights_location(self) -> str:
        if self.config:
            return "pickle_weights"
        if any(name.endswith(".blob") for name in self.artifacts):
            return "binary_blob"
        return "so"


def plan_aoti(entries: Mapping[str, ZipEntry], root: str) -> dict[str, AotiModel]:
    """The AOTI models of a PT2 archive, by folder name (empty when there are none)."""
    prefix = f"{root}/{AOTI_DIR}"
    artifacts: dict[str, list[str]] = {}
    for name in entries:
        if name.startswith(prefix):
            model, slash, rest = name[len(prefix) :].partition("/")
            if slash and model and rest:
                artifacts.setdefault(model, []).append(name)
    models = {}
    for model, names in sorted(artifacts.items()):
        config = f"{prefix}{model}/{WEIGHTS_CONFIG}"
        models[model] = AotiModel(model, config if config in entries else None, tuple(sorted(names)))
    return models


def describe_unreadable(model: AotiModel) -> str:
    """Why an AOTI model's weights cannot be read, and what was found instead."""
    short = ", ".join(name.rsplit("/", 1)[-1] for name in model.artifacts)
    where = {
        "binary_blob": "in a binary blob (*.wrapper_weights.blob)",
        "so": "compiled into the shared library (.so, between _binary_constants_bin_start and _end)",
    }[model.weights_location]
    return (
        f"AOTInductor model {model.listed_name!r}: weights are {where}; their names, dtypes and "
        "offsets exist only in the generated C++ (*.wrapper.cpp), so they cannot be read without "
        f"running the generated code (re-package with package_constants_on_disk_format="
        f"'pickle_weights' and package_constants_in_so=False to make them readable); artifacts: {short}"
    )


class _ConfigEntry(msgspec.Struct, array_like=True):
    file: str
    sizes: list[int]
    strides: list[int]
    storage_offset: int


@dataclass(frozen=True, slots=True)
class AotiWeight:
    """One weights_config.json entry: the nested torch.save file and the view's layout."""

    file: str
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    storage_offset: int


_DECODER = msgspec.json.Decoder(dict[str, _ConfigEntry])


def parse_weights_config(data: bytes | memoryview, where: str) -> dict[str, AotiWeight]:
    try:
        raw = _DECODER.decode(data)
    except msgspec.DecodeError as exc:
        raise ArchiveFormatError(f"{where}: not a weights config ({exc})") from None
    weights = {}
    for fqn, item in raw.items():
        if len(item.sizes) > MAX_NDIM or len(item.sizes) != len(item.strides):
            raise ArchiveFormatError(
                f"{where}: {fqn!r} has {len(item.sizes)} sizes, {len(item.strides)} strides"
            )
        if any(not 0 <= v <= MAX_TENSOR_BYTES for v in (*item.sizes, *item.strides, item.storage_offset)):
            raise ArchiveFormatError(f"{where}: {fqn!r} has a size, stride or offset out of range")
        if "/" in item.file or not item.file:
            raise ArchiveFormatError(f"{where}: {fqn!r} names weight file {item.file!r}")
        weights[fqn] = AotiWeight(item.file, tuple(item.sizes), tuple(item.strides), item.storage_offset)
    return weights


def weight_file_entry(root: str, weight: AotiWeight) -> str:
    return f"{root}/{WEIGHTS_DIR}{weight.file}"


def nested_pickle(outer: str, entries: Mapping[str, ZipEntry]) -> ZipEntry:
    """The data.pkl of the torch.save archive stored in `outer` (entries by their nested names)."""
    found = [entry for name, entry in entries.items() if name.endswith("/" + PICKLE) and name.count("/") == 1]
    if len(found) != 1:
        raise ArchiveFormatError(f"nested archive {outer!r} is not a torch.save archive (no single data.pkl)")
    return found[0]


def nested_storage(outer: str, entries: Mapping[str, ZipEntry], record: object) -> ZipEntry:
    """The storage entry the nested data.pkl's tensor views."""
    if type(record) is not TensorRecord:
        raise UnsupportedPayload(
            f"nested archive {outer!r}: its data.pkl holds a {type(record).__name__}, not a tensor"
        )
    pickle_name = nested_pickle(outer, entries).name.rsplit(NESTED_SEPARATOR, 1)[-1]
    name = f"{pickle_name.rsplit('/', 1)[0]}/{STORAGE_DIR}{record.storage.key}"
    storage = entries.get(name)
    if storage is None:
        raise ArchiveFormatError(
            f"nested archive {outer!r}: data.pkl names storage {name!r}, which it does not hold"
        )
    return storage


def aoti_tensor_info(
    fqn: str, model: AotiModel, weight: AotiWeight, record: TensorRecord, storage: ZipEntry, where: str
) -> TensorInfo:
    """A TensorInfo for one config entry: dtype from the nested data.pkl's tensor, bytes from the
    nested storage entry (`storage`, addressed in the outer archive), layout from the config."""
    storage_dtype = BY_NAME.get(record.storage.dtype)
    nbytes = record.storage.numel * (storage_dtype.itemsize if storage_dtype else 1)
    if storage.size != nbytes:
        raise ArchiveFormatError(
            f"{where}: storage holds {nbytes} bytes by its data.pkl, but {storage.name!r} has {storage.size}"
        )
    return strided_info(fqn, model.listed_name, "weight", record.dtype, weight.sizes, weight.strides,
                        weight.storage_offset, storage, nbytes, record.is_param, record.requires_grad,
                        f"{where}: {fqn!r}")  # fmt: skip
