"""`reader.torch.load`: a whole model as torch tensors, built from the same read plan as
`reader.load`, with no pickle executed and no `torch.export.load`.

torch is imported here only (an optional dependency of this module alone). Each payload's bytes
become one untyped storage, and every name that views it is a tensor on that storage with the
archive's dtype, sizes, strides and storage offset: tied weights and views share storage exactly
as in `torch.export.load(p).state_dict` plus its constants (or `torch.load(weights_only=True)`
for a checkpoint), so `model.load_state_dict(reader.torch.load(location))` works.
Locally the storages map the file copy-on-write: pages are read when touched, and writing to a
tensor changes the process's copy only. `reader.torch.read(location, name, index=...)` (and
`read_tensor` on an open archive) reads one tensor, or a slice of it, as a row-major torch tensor.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .loading.arrays import ORDERS
from .loading.sync import with_archive
from .sliced import SliceBytes
from .sources import ByteSource

if TYPE_CHECKING:
    import torch as _torch

    from .archive import Archive
    from .sharded import ShardedArchive


async def load_archive(
    archive: Archive | ShardedArchive,
    *,
    model: str | None = None,
    prefix: str | None = None,
    names: Sequence[str] | None = None,
    order: str = "default",
    copy: bool = False,
    verify: bool | None = None,
) -> dict[str, _torch.Tensor]:
    """The selection of an open archive (as `Archive.load` selects it) as torch tensors."""
    import torch

    from .loading.load import load_storages
    from .sharded import ShardedArchive

    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
    if isinstance(archive, ShardedArchive):  # each shard's part as from its own file, merged
        return await archive.load_with(
            lambda shard, part: load_archive(shard, names=part, order=order, copy=copy, verify=verify),
            model=model, prefix=prefix, names=names,
        )  # fmt: skip
    plan, buffers = await load_storages(
        archive, model=model, prefix=prefix, names=names, copy=copy, verify=verify
    )
    storages = {name: _storage(torch, buffer) for name, buffer in buffers.items()}
    tensors = {}
    for info in plan.tensors:
        tensor = torch.empty(0, dtype=getattr(torch, info.dtype or "")).set_(
            storages[info.storage.entry], info.storage_offset or 0, info.sizes or (), info.strides or ()
        )
        if order == "contiguous":
            tensor = tensor.contiguous()
        tensors[info.name] = tensor
    return tensors


def _storage(torch: Any, buffer: np.ndarray) -> _torch.UntypedStorage:
    if not buffer.nbytes:
        return torch.UntypedStorage(0)
    return torch.frombuffer(buffer, dtype=torch.uint8).untyped_storage()


def load(
    location: str | os.PathLike[str] | ByteSource,
    *,
    model: str | None = None,
    prefix: str | None = None,
    names: Sequence[str] | None = None,
    order: str = "default",
    copy: bool = False,
    verify: bool | None = None,
    **options: Any,
) -> dict[str, _torch.Tensor]:
    """Open `location`, load the selection as torch tensors, close. `options` go to `open_archive`."""
    return with_archive(
        location,
        options,
        lambda archive: load_archive(
            archive, model=model, prefix=prefix, names=names, order=order, copy=copy, verify=verify
        ),
    )


async def read_tensor(
    archive: Archive, name: str, *, model: str | None = None, index: Any = None
) -> _torch.Tensor:
    """One tensor of an open archive as a row-major torch tensor of its dtype, or with `index`
    (NumPy basic indexing) `full[index]`, reading only the byte runs the slice covers."""
    import torch

    tensor = archive.tensor(name, model, "contiguous")
    body = tensor if index is None else SliceBytes(tensor, index)
    data = await body.read()
    dtype = getattr(torch, tensor.info.dtype or "")
    if not data:
        return torch.empty(body.info.sizes or (), dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(body.info.sizes or ())


def read(
    location: str | os.PathLike[str] | ByteSource,
    name: str,
    *,
    model: str | None = None,
    index: Any = None,
    **options: Any,
) -> _torch.Tensor:
    """Open `location`, read one tensor (or `full[index]` of it) as `read_tensor` does, close."""
    return with_archive(
        location, options, lambda archive: read_tensor(archive, name, model=model, index=index)
    )
