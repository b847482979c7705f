"""pt2serve's reader: tensors out of PyTorch .pt2 archives by name, without torch.

async with reader.open_archive("model.pt2") as ar:
    info = ar.layout("linear.weight")
    data = await ar.read("linear.weight")

arrays = reader.load("s3://bucket/model.pt2")         # every weight, as NumPy arrays
tensors = reader.torch.load("s3://bucket/model.pt2")  # the same as torch tensors (torch optional)
rank_1 = reader.load("s3://bucket/model.pt2", shard=reader.Shard(1, 4, {"*.mlp.*": 0}))  # its blocks
with reader.safe_open("s3://bucket/model.pt2") as f:  # safetensors' surface, for its loaders
    block = f.get_slice("lm_head.weight")[0:128]

`open_archive` gives an `ArchiveLike` (an `Archive`, or a `ShardedArchive` for a sharded
checkpoint's index); docs/api.md says which read to use when.
"""

from .archives.archive import Archive
from .archives.archive_like import ArchiveLike
from .archives.opener import open_archive
from .archives.sharded import ShardedArchive
from .blocking.sync import load
from .bodies.tensor import Order
from .compare import compare
from .errors import (
    ArchiveFormatError,
    FileNotFound,
    HostRefused,
    IntegrityError,
    LocationError,
    ModelNotFound,
    NoReadableWeights,
    NotCached,
    OriginUnreachable,
    ReaderError,
    SourceChanged,
    SourceError,
    TensorNotFound,
    UnsupportedPayload,
)
from .loading.shards import InvalidShard, Shard
from .pt2.executorch import EmbeddedFile
from .pt2.slicing import Index
from .pt2.tensorinfo import StorageRef, TensorInfo
from .safe_open_handle import safe_open

__all__ = [
    "Archive",
    "ArchiveFormatError",
    "ArchiveLike",
    "EmbeddedFile",
    "FileNotFound",
    "HostRefused",
    "Index",
    "IntegrityError",
    "InvalidShard",
    "LocationError",
    "ModelNotFound",
    "NoReadableWeights",
    "NotCached",
    "Order",
    "OriginUnreachable",
    "ReaderError",
    "Shard",
    "ShardedArchive",
    "SourceChanged",
    "SourceError",
    "StorageRef",
    "TensorInfo",
    "TensorNotFound",
    "UnsupportedPayload",
    "compare",
    "load",
    "open_archive",
    "safe_open",
]
