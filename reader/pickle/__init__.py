"""Sans-IO, non-executing reader of the pickles torch.save writes.

`machine.load` interprets pickle opcodes into plain data with an explicit
allowlist of globals and never imports or calls anything the pickle names;
`torch_objects` is torch's allowlist (tensors, parameters, storages, state-dict
containers); `checkpoint` turns a torch.save ZIP's data.pkl into TensorInfo.
"""

from .checkpoint import (
    CHECKPOINT_MODEL,
    CheckpointPlan,
    build_checkpoint_index,
    load_torch_pickle,
    plan_checkpoint,
)
from .errors import ForbiddenCall, ForbiddenGlobal, ForbiddenOpcode, MalformedPickle, PickleLimitExceeded
from .limits import DEFAULT_LIMITS, Limits
from .machine import OrderedDictValue, Reducer, load
from .torch_objects import TORCH_GLOBALS, StorageRecord, TensorRecord

__all__ = [
    "CHECKPOINT_MODEL",
    "DEFAULT_LIMITS",
    "TORCH_GLOBALS",
    "CheckpointPlan",
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
    "build_checkpoint_index",
    "load",
    "load_torch_pickle",
    "plan_checkpoint",
]
