"""`Archive.load`: the selection, then the plan, the storages and the arrays."""

from __future__ import annotations

import numpy as np

from ..sources import LocalFileSource
from .arrays import view_array
from .plan import LoadPlan, plan_load
from .selection import Loadable, Selection
from .storages import Buffers, read_storages


async def load_storages(archive: Loadable, selection: Selection) -> tuple[LoadPlan, Buffers]:
    """The plan for a selection and its storages' bytes (what reader.torch builds on too)."""
    payloads = archive.payloads()
    plan = plan_load(selection.tensors(archive), payloads.entries)
    buffers = await read_storages(
        payloads.source, payloads.fetcher, plan, copy=selection.copy, verify=selection.verify
    )
    return plan, buffers


async def load_arrays(archive: Loadable, selection: Selection) -> dict[str, np.ndarray]:
    plan, buffers = await load_storages(archive, selection)
    if isinstance(archive.payloads().source, LocalFileSource):
        for buffer in buffers.values():
            if not buffer.flags.owndata:  # a view of the mapped file: read-only, as documented
                buffer.flags.writeable = False
    return {
        info.name: view_array(info, buffers[info.storage.entry], selection.order) for info in plan.tensors
    }
