"""A sharded checkpoint's index (`pytorch_model.bin.index.json`), sans-IO: which shard holds which name.

transformers writes `{"metadata": {"total_size": N}, "weight_map": {name: shard_file}}` beside the
shards (`pytorch_model-00001-of-00003.bin`, ...). Every shard file is a bare file name in the
index's own folder: a name with a path separator, `.`/`..`, a scheme or a drive (`../x.bin`,
`/etc/x`, `https://elsewhere/x.bin`, `C:x`) is refused, as is another index, so an index can
never make a reader fetch anything outside the folder it was given.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from urllib.parse import quote

from ...errors import ArchiveFormatError
from ...sources.location import split_location

INDEX_SUFFIX = ".index.json"
MAX_INDEX_BYTES = 64 << 20  # a 1,000-layer model's index is a few MiB
FORBIDDEN_IN_SHARD_NAME = ("/", "\\", ":", "\x00")


@dataclass(frozen=True)
class ShardIndex:
    """`weight_map` in the index's order; `shards` are the distinct shard files, sorted (the
    `-0000k-of-0000n` numbering sorts them as written); `total_size` as the index states it."""

    weight_map: dict[str, str]
    shards: tuple[str, ...]
    total_size: int | None


def is_shard_index(location: object) -> bool:
    """True if `location` (a path or URL) names a sharded checkpoint's index: `*.index.json`."""
    if not isinstance(location, (str, os.PathLike)):
        return False
    text = os.fspath(location)
    if "://" in text:
        text = text.split("#", 1)[0].split("?", 1)[0]
    return str(text).endswith(INDEX_SUFFIX)


def parse_shard_index(data: bytes, where: str) -> ShardIndex:
    """The index's weight map, every shard name checked; ArchiveFormatError if malformed."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArchiveFormatError(f"{where}: not a JSON sharded-checkpoint index: {exc}") from None
    weight_map = document.get("weight_map") if isinstance(document, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ArchiveFormatError(f'{where}: no "weight_map" object naming each tensor\'s shard file')
    for name, shard in weight_map.items():
        if not isinstance(shard, str):
            raise ArchiveFormatError(f"{where}: weight_map gives {name!r} the shard {shard!r}, not a name")
        check_shard_name(shard, where)
    metadata = document.get("metadata")
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    total_size = int(total) if isinstance(total, (int, float)) and not isinstance(total, bool) else None
    return ShardIndex(dict(weight_map), tuple(sorted(set(weight_map.values()))), total_size)


def check_shard_name(shard: str, where: str) -> None:
    """A shard must be a plain file name in the index's folder (see the module docstring)."""
    forbidden = any(c in shard for c in FORBIDDEN_IN_SHARD_NAME) or not shard.isprintable()
    if shard in ("", ".", "..") or forbidden:
        raise ArchiveFormatError(
            f"{where}: weight_map names the shard {shard!r}; a shard must be a file name in the "
            "index's own folder (no path, no URL)"
        )
    if shard.endswith(INDEX_SUFFIX):
        raise ArchiveFormatError(f"{where}: weight_map names another index, {shard!r}, as a shard")


def shard_location(index_location: str, shard: str) -> str:
    """Where `shard` lives: beside the index, with everything else of its location kept (scheme,
    host, bucket, a Hub revision, a URL's query)."""
    if "://" not in index_location:
        return os.path.join(os.path.dirname(index_location), shard)
    scheme = split_location(index_location).scheme
    base, mark, rest = _split_suffix(index_location)
    folder = base.rsplit("/", 1)[0]
    name = quote(shard, safe="") if scheme in ("http", "https") else shard
    return f"{folder}/{name}{mark}{rest}"


def _split_suffix(url: str) -> tuple[str, str, str]:
    """(the URL up to its query or fragment, the mark that starts them, the rest)."""
    cut = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=len(url))
    return url[:cut], url[cut : cut + 1], url[cut + 1 :]
