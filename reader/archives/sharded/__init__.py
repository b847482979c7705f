"""Sharded checkpoints: a `*.bin.index.json` and the torch.save shards its weight_map names, as one
archive (`open_archive` picks this for a location ending in `.index.json`)."""

from .archive import CONTAINER, ShardedArchive, open_sharded
from .index import ShardIndex, is_shard_index, parse_shard_index, shard_location

__all__ = [
    "CONTAINER",
    "ShardIndex",
    "ShardedArchive",
    "is_shard_index",
    "open_sharded",
    "parse_shard_index",
    "shard_location",
]
