"""pt2serve's reader: tensors out of PyTorch .pt2 archives by name, without torch.

async with reader.open_archive("model.pt2") as ar:
    info = ar.layout("linear.weight")
    data = await ar.read("linear.weight")
"""

from .archive import Archive, open_archive
from .errors import (
    ArchiveFormatError,
    FileNotFound,
    IntegrityError,
    LocationError,
    ModelNotFound,
    NoReadableWeights,
    ReaderError,
    SourceChanged,
    SourceError,
    TensorNotFound,
    UnsupportedPayload,
)
from .pt2.executorch import EmbeddedFile
from .pt2.tensorinfo import StorageRef, TensorInfo

__all__ = [
    "Archive",
    "ArchiveFormatError",
    "EmbeddedFile",
    "FileNotFound",
    "IntegrityError",
    "LocationError",
    "ModelNotFound",
    "NoReadableWeights",
    "ReaderError",
    "SourceChanged",
    "SourceError",
    "StorageRef",
    "TensorInfo",
    "TensorNotFound",
    "UnsupportedPayload",
    "open_archive",
]
