"""Sans-IO, non-executing reader of the pickles torch.save writes.

`machine.load` interprets pickle opcodes into plain data with an explicit
allowlist of globals and never imports or calls anything the pickle names;
`torch_objects` is torch's allowlist (tensors, parameters, storages, state-dict
containers) and `load_torch_pickle`. What a checkpoint's object means as tensors is
reader.pt2.checkpoint's job, a layer up.
"""

from .errors import ForbiddenCall, ForbiddenGlobal, ForbiddenOpcode, MalformedPickle, PickleLimitExceeded
from .limits import DEFAULT_LIMITS, Limits
from .machine import OrderedDictValue, Reducer, load
from .torch_objects import TORCH_GLOBALS, StorageRecord, TensorRecord, load_torch_pickle

__all__ = [
    "DEFAULT_LIMITS",
    "TORCH_GLOBALS",
    "ForbiddenCall",
    "ForbiddenGlobal",
    "ForbiddenOpcode",
    "Limits",
    "MalformedPickle",
    "OrderedDictValue",
    "PickleLimitExceeded",
    "Reducer",
    "StorageRecord",
    "TensorRecord",
    "load",
    "load_torch_pickle",
]
