"""PT2 semantics over a parsed ZIP: root folder, models, payload configs → TensorInfo.

Sans-IO like zipfmt: `plan_index` says which small entries are needed, the
caller fetches them however it likes, `build_index` turns them into TensorInfo.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ArchiveFormatError, UnsupportedPayload
from ..zipfmt import ZipEntry
from .payload import tensor_info
from .schema import decode_payload_config
from .tensorinfo import TensorInfo

ARCHIVE_FORMAT = "archive_format"
ARCHIVE_VERSION = "archive_version"
BYTEORDER = "byteorder"
MODELS_DIR = "models/"
WEIGHTS_DIR = "data/weights/"
CONSTANTS_DIR = "data/constants/"


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
        sources = [(configs.weights, f"{plan.root}/{WEIGHTS_DIR}", "weight")]
        if configs.constants:
            sources.append((configs.constants, f"{plan.root}/{CONSTANTS_DIR}", "constant"))
        for config_name, folder, kind in sources:
            for fqn, meta in decode_payload_config(contents[config_name], config_name).items():
                if fqn in tensors:
                    raise ArchiveFormatError(f"{config_name}: {fqn!r} is listed twice in model {model!r}")
                tensors[fqn] = tensor_info(meta, fqn, model, kind, entries, folder, config_name)
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
