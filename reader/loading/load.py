"""`Archive.load`: which tensors, then the plan, the storages and the arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..cache.source import CachedSource
from ..pt2.tensorinfo import TensorInfo
from ..sources import LocalFileSource
from .arrays import ORDERS, view_array
from .plan import LoadPlan, plan_load
from .storages import Buffers, read_storages

if TYPE_CHECKING:
    from ..archive import Archive


def select_tensors(
    archive: Archive, model: str | None, prefix: str | None, names: Sequence[str] | None
) -> list[TensorInfo]:
    """Named tensors as given (each must be readable), else every readable tensor of one model
    (the named one, else the default) whose name starts with `prefix`: weights and constants, as
    torch's state dict plus its constants holds them."""
    if names is not None:
        return [archive.layout(name, model) for name in dict.fromkeys(names)]
    resolved = archive.resolve_model(model)
    return [t for t in archive.tensors(resolved) if t.readable and t.name.startswith(prefix or "")]


async def load_storages(
    archive: Archive,
    *,
    model: str | None = None,
    prefix: str | None = None,
    names: Sequence[str] | None = None,
    copy: bool = False,
    verify: bool | None = None,
) -> tuple[LoadPlan, Buffers]:
    """The plan for a selection and its storages' bytes (what reader.torch builds on too)."""
    plan = plan_load(select_tensors(archive, model, prefix, names), archive._entries)
    buffers = await read_storages(archive.source, archive._fetcher, plan, copy=copy, verify=verify)
    return plan, buffers


async def load_arrays(
    archive: Archive,
    *,
    model: str | None = None,
    prefix: str | None = None,
    names: Sequence[str] | None = None,
    order: str = "default",
    copy: bool = False,
    verify: bool | None = None,
) -> dict[str, np.ndarray]:
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
    plan, buffers = await load_storages(
        archive, model=model, prefix=prefix, names=names, copy=copy, verify=verify
    )
    if isinstance(archive.source, (LocalFileSource, CachedSource)):
        for buffer in buffers.values():
            if not buffer.flags.owndata:  # a view of the mapped file: read-only, as documented
                buffer.flags.writeable = False
    return {info.name: view_array(info, buffers[info.storage.entry], order) for info in plan.tensors}
