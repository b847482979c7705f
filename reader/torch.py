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
`reader.torch.StorageReader` (reader/dcp.py) is a torch.distributed.checkpoint reader of an archive.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from .archives import deprecated
from .blocking.sync import OpenOptions, with_archive
from .bodies.tensor import Order
from .bodies.tensor_slice import SliceBytes
from .loading.budget import budget_bytes
from .loading.load import iter_storages, load_storages
from .loading.selection import Selection
from .loading.shards import Shard
from .pt2.dtypes import dtype_of
from .pt2.slicing import Index
from .pt2.tensorinfo import TensorInfo
from .sources import DEFAULT_CHUNK_SIZE, ByteSource, HttpOptions, S3Settings
from .torchviews import storage_of, tensor_on

if TYPE_CHECKING:
    import torch as _torch

    from .archives.archive import Archive
    from .archives.archive_like import ArchiveLike
    from .archives.sharded import ShardedArchive


@deprecated.keyword_only("model")
async def load_archive(
    archive: ArchiveLike,
    *,
    model: str | None = None,
    prefix: str | None = None,
    names: Sequence[str] | None = None,
    order: Order = "default",
    copy: bool = False,
    verify: bool | None = None,
    shard: Shard | None = None,
) -> dict[str, _torch.Tensor]:
    """The selection of an open archive (as `Archive.load` selects it) as torch tensors."""
    return await _tensors(archive, Selection(model, prefix, names, order, copy, verify, shard))


@deprecated.keyword_only("model")
def iter_load(
    archive: ArchiveLike,
    *,
    model: str | None = None,
    prefix: str | None = None,
    names: Sequence[str] | None = None,
    order: Order = "default",
    copy: bool = False,
    verify: bool | None = None,
    shard: Shard | None = None,
    max_buffered: int | None = None,
) -> AsyncIterator[tuple[str, _torch.Tensor]]:
    """`Archive.iter_load` as torch tensors: `async for name, tensor in reader.torch.iter_load(ar)`,
    within the same memory budget (`max_buffered`: a storage's bytes count until the loop asks for
    the next tensor after its tensors; a storage bigger than the budget is read alone)."""
    selection = Selection(model, prefix, names, order, copy, verify, shard)
    return _iter_tensors(archive, selection, budget_bytes(max_buffered))


async def _tensors(archive: Archive | ShardedArchive, selection: Selection) -> dict[str, _torch.Tensor]:
    import torch

    from .archives.sharded import ShardedArchive

    if isinstance(archive, ShardedArchive):  # each shard's part as from its own file, merged
        return await archive._load_with(selection, _tensors)
    plan, buffers = await load_storages(archive, selection)
    storages = {name: storage_of(torch, buffer) for name, buffer in buffers.items()}
    return {info.name: _tensor(torch, info, storages[info.storage.entry], selection) for info in plan.tensors}


async def _iter_tensors(
    archive: Archive | ShardedArchive, selection: Selection, max_buffered: int
) -> AsyncIterator[tuple[str, _torch.Tensor]]:
    import torch

    from .archives.sharded import ShardedArchive

    if isinstance(archive, ShardedArchive):  # shard after shard, each part as it lands
        for shard, part in archive._parts(selection):
            async with contextlib.aclosing(_iter_tensors(shard, part, max_buffered)) as tensors:
                async for item in tensors:
                    yield item
        return

    storages = iter_storages(archive, selection, max_buffered)
    async with contextlib.aclosing(storages):  # closed with this one
        async for infos, buffer in storages:
            storage = storage_of(torch, buffer)
            for info in infos:
                yield info.name, _tensor(torch, info, storage, selection)
            del buffer, storage  # the consumer came back: what it dropped is free


def _tensor(
    torch: Any, info: TensorInfo, storage: _torch.UntypedStorage, selection: Selection
) -> _torch.Tensor:
    tensor = tensor_on(torch, info, storage)
    return tensor.contiguous() if selection.order == "contiguous" else tensor


def load(
    location: str | os.PathLike[str] | ByteSource,
    *,
    model: str | None = None,
    prefix: str | None = None,
    names: Sequence[str] | None = None,
    order: Order = "default",
    copy: bool = False,
    verify: bool | None = None,
    shard: Shard | None = None,
    tail_size: int | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    http_options: HttpOptions | None = None,
    s3_settings: S3Settings | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    stale_if_error: bool | None = None,
) -> dict[str, _torch.Tensor]:
    """Open `location`, load the selection as torch tensors, close. The keywords are those of
    `reader.load`."""
    selection = Selection(model, prefix, names, order, copy, verify, shard)
    options = OpenOptions(
        tail_size, chunk_size, http_options, s3_settings, cache_dir, offline, stale_if_error
    )
    return with_archive(location, options, lambda archive: _tensors(archive, selection))


async def read_tensor(
    archive: ArchiveLike, name: str, *, model: str | None = None, index: Index | None = None
) -> _torch.Tensor:
    """One tensor of an open archive as a row-major torch tensor of its dtype, or with `index`
    (NumPy basic indexing) `full[index]`, reading only the byte runs the slice covers."""
    import torch

    tensor = archive.tensor(name, model=model, order="contiguous")
    body = tensor if index is None else SliceBytes(tensor, index)
    data = await body.read()
    dtype = dtype_of(tensor.geometry.dtype).torch
    if not data:
        return torch.empty(body.geometry.sizes, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(body.geometry.sizes)


def read(
    location: str | os.PathLike[str] | ByteSource,
    name: str,
    *,
    model: str | None = None,
    index: Index | None = None,
    tail_size: int | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    http_options: HttpOptions | None = None,
    s3_settings: S3Settings | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    stale_if_error: bool | None = None,
) -> _torch.Tensor:
    """Open `location`, read one tensor (or `full[index]` of it) as `read_tensor` does, close. The
    other keywords are `open_archive`'s."""
    options = OpenOptions(
        tail_size, chunk_size, http_options, s3_settings, cache_dir, offline, stale_if_error
    )
    return with_archive(
        location, options, lambda archive: read_tensor(archive, name, model=model, index=index)
    )


def __getattr__(name: str) -> Any:
    """`StorageReader` (and its `RegionOutOfRange`) from reader/dcp.py, imported on first use: it
    subclasses torch's DCP reader, so importing this module still needs no torch."""
    if name in ("StorageReader", "RegionOutOfRange"):
        from . import dcp

        return getattr(dcp, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
