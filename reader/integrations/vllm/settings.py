"""What `--model-loader-extra-config` says to the pt2serve load format, checked once, and where the
weights are when it names no location: no vllm and no torch here.

`{"location": "s3://bucket/model.pt2", "cache_dir": ..., "offline": ..., "stale_if_error": ...,
"verify": ..., "ranks": "read-once" | "each-reads-all", "s3": {S3Settings fields},
"http": {HttpOptions fields}}`; every key is optional. Credentials
and endpoints come from the environment as for every reader open (AWS_*, PT2SERVE_S3_ENDPOINT,
GOOGLE_APPLICATION_CREDENTIALS, HF_TOKEN, ...) unless `s3` spells them out.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...archives.sharded import is_shard_index
from ...blocking.sync import OpenOptions
from ...sources import HttpOptions, S3Settings

# what transformers' Trainer saves beside the weights (vLLM leaves the same files out)
NOT_WEIGHTS = ("training_args.bin", "optimizer.bin")
SAFETENSORS_INDEX = ".safetensors.index.json"
# how tensor-parallel ranks read: together, each byte once (handed to each other), or each all of it
RANKS_READ_ONCE, RANKS_EACH_READS_ALL = "read-once", "each-reads-all"


@dataclass(frozen=True)
class LoaderSettings:
    """The extra config of one load: where the weights are (None: the model folder's own files),
    how to open them, and whether to check every CRC-32 (None: whatever is read)."""

    location: str | None = None
    cache_dir: str | None = None
    offline: bool | None = None
    stale_if_error: bool | None = None
    verify: bool | None = None
    ranks: str = RANKS_READ_ONCE
    s3_settings: S3Settings | None = None
    http_options: HttpOptions | None = None

    @classmethod
    def from_extra_config(cls, extra: Mapping[str, Any] | None) -> LoaderSettings:
        """The settings `extra` spells; an unknown key or a value of the wrong type is a ValueError
        naming it (a typo must not fall back to the model folder silently)."""
        extra = dict(extra or {})
        unknown = sorted(set(extra) - set(_KEYS))
        if unknown:
            raise ValueError(
                f"pt2serve load format: unknown model_loader_extra_config keys {unknown}; "
                f"known: {sorted(_KEYS)}"
            )
        for key, value in extra.items():
            if value is not None and not isinstance(value, _KEYS[key]):
                raise ValueError(
                    f"pt2serve load format: model_loader_extra_config[{key!r}] must be "
                    f"{_type_names(_KEYS[key])}, not {type(value).__name__}"
                )
        ranks = extra.get("ranks") or RANKS_READ_ONCE
        if ranks not in (RANKS_READ_ONCE, RANKS_EACH_READS_ALL):
            raise ValueError(
                f"pt2serve load format: model_loader_extra_config['ranks'] must be "
                f"{RANKS_READ_ONCE!r} or {RANKS_EACH_READS_ALL!r}, not {ranks!r}"
            )
        return cls(
            location=extra.get("location"),
            cache_dir=extra.get("cache_dir"),
            offline=extra.get("offline"),
            stale_if_error=extra.get("stale_if_error"),
            verify=extra.get("verify"),
            ranks=ranks,
            s3_settings=_options(S3Settings, "s3", extra.get("s3")),
            http_options=_options(HttpOptions, "http", extra.get("http")),
        )

    def open_options(self) -> OpenOptions:
        """The keywords `open_archive` takes from these settings."""
        return OpenOptions(
            cache_dir=self.cache_dir,
            offline=self.offline,
            stale_if_error=self.stale_if_error,
            s3_settings=self.s3_settings,
            http_options=self.http_options,
        )

    def locations(self, model: str) -> list[str]:
        """The archives to read: the configured location, else the weights in the model folder."""
        return [self.location] if self.location else folder_weights(model)


_KEYS: dict[str, type | tuple[type, ...]] = {
    "location": str,
    "cache_dir": str,
    "offline": bool,
    "stale_if_error": bool,
    "verify": bool,
    "ranks": str,
    "s3": dict,
    "http": dict,
}


def _type_names(kinds: type | tuple[type, ...]) -> str:
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    return " or ".join({str: "a string", bool: "true or false", dict: "an object"}[kind] for kind in kinds)


def _options(kind: type, key: str, values: Mapping[str, Any] | None) -> Any:
    if values is None:
        return None
    known = {field.name for field in dataclasses.fields(kind)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(
            f"pt2serve load format: unknown keys {unknown} in model_loader_extra_config[{key!r}]; "
            f"known: {sorted(known)}"
        )
    return kind(**values)


def folder_weights(model: str | os.PathLike[str]) -> list[str]:
    """The weights of a local model folder, in the first form it has: one `.pt2`, else one sharded
    checkpoint's `*.index.json` (not safetensors'), else its `*.bin` files (the Trainer's state
    left out). A ValueError says what to do where the folder has none, or several of one form."""
    folder = pathlib.Path(model)
    if not folder.is_dir():
        raise ValueError(
            f"pt2serve load format: {model!r} is not a local folder, so give the weights' location: "
            """--model-loader-extra-config '{"location": "s3://bucket/model.pt2"}'"""
        )
    files = sorted(path for path in folder.iterdir() if path.is_file())
    pt2 = [path for path in files if path.suffix == ".pt2"]
    indexes = [
        path for path in files if is_shard_index(path.name) and not path.name.endswith(SAFETENSORS_INDEX)
    ]
    bins = [path for path in files if path.suffix == ".bin" and path.name not in NOT_WEIGHTS]
    for found in (pt2, indexes):
        if len(found) > 1:
            raise ValueError(
                f"pt2serve load format: {folder} holds several of {[path.name for path in found]}: "
                "name one as model_loader_extra_config's location"
            )
    chosen = pt2 or indexes or bins
    if not chosen:
        raise ValueError(
            f"pt2serve load format: no .pt2, *.index.json or *.bin weights in {folder}; "
            "name them as model_loader_extra_config's location"
        )
    return [str(path) for path in chosen]
