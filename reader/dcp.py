"""`reader.torch.StorageReader`: torch.distributed.checkpoint (DCP) loads a PyTorch ZIP archive
(`.pt2`, a `torch.save` checkpoint, a sharded `*.index.json`) from any location, each rank reading
only the bytes of its own chunks.

    dcp.load(state_dict, storage_reader=reader.torch.StorageReader("s3://bucket/model.pt2"))

`read_metadata` describes every readable tensor of the model's checkpoint (an exported program's state
dict: its parameters and persistent buffers, not its constants) as one chunk at offset 0 with its full
sizes (the archive is one unsharded save), so DCP's planner turns each state-dict entry into
ReadItems whose `storage_offsets` and `lengths` are the part the rank owns (a DTensor's local
shard), and `read_data` reads those regions as one plan (reader/loading/regions.py): a whole
tensor as its storage (CRC-checked), any other region as the byte runs it covers, coalesced with
the rank's other regions into as few ranged requests as the store allows. Each region is copied
into `planner.resolve_tensor(item)` as it lands. A sharded checkpoint's regions are read shard by
shard, the shards concurrently.

The archive is opened once per reader, on an event loop thread of the reader's own (its
connections live there), and stays open until `close()`, `reset(checkpoint_id)` or the reader is
collected. Only tensors are described: the archive holds no DCP byte items, so a state-dict entry
that is not a tensor of the archive fails DCP's planner ("Missing key in checkpoint state_dict")
and a BYTE_IO ReadItem from a custom planner raises UnsupportedPayload. A region outside its
tensor raises `RegionOutOfRange` (an IndexError) naming the tensor; nothing is read then.
"""

from __future__ import annotations

import os
import queue
import uuid
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.distributed.checkpoint import StorageReader as _DcpStorageReader
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.futures import Future

from .archives.archive import Archive
from .archives.sharded import ShardedArchive
from .blocking.loop import BackgroundLoop
from .blocking.sync import OpenOptions
from .cache import CacheStore
from .errors import UnsupportedPayload
from .loading.budget import Budget, budget_bytes
from .loading.regions import Region, RegionLanded, RegionOutOfRange, read_regions
from .loading.selection import checkpoint
from .pt2.dtypes import dtype_of
from .pt2.tensorinfo import TensorInfo
from .sources import DEFAULT_CHUNK_SIZE, HttpOptions, S3Settings, is_remote
from .tasks import task_group
from .torchviews import storage_of, tensor_on

__all__ = ["RegionOutOfRange", "StorageReader"]

_DONE = object()


class _Handle:
    """The reader's loop thread and open archive: closed by `close()` or the reader's finalizer,
    which must not hold the reader itself."""

    def __init__(self) -> None:
        self.loop: BackgroundLoop | None = None
        self.archive: Archive | ShardedArchive | None = None

    def running(self) -> BackgroundLoop:
        if self.loop is None or not self.loop.usable:  # (a forked child: the parent's loop is not here)
            self.loop, self.archive = BackgroundLoop("pt2serve-dcp"), None
        return self.loop

    def close_archive(self) -> None:
        archive, self.archive = self.archive, None
        if archive is not None and self.loop is not None and self.loop.usable:
            self.loop.run(archive.close())

    def close(self) -> None:
        self.close_archive()
        if self.loop is not None:
            self.loop.close()
            self.loop = None


class StorageReader(_DcpStorageReader):
    """A DCP StorageReader over a PyTorch ZIP archive at `location` (a path, http(s)://, s3://, gs://,
    az://, hf://, a sharded `*.index.json`); `model` picks one model of a `.pt2` (default: the only
    one, else "model"). `max_buffered`: the bytes of whole tensors read but not yet copied into the
    state dict, plus those being read (None: PT2SERVE_MAX_BUFFERED, else 256 MiB; a tensor bigger
    than that is read alone). The other keywords are `reader.open_archive`'s."""

    def __init__(
        self,
        location: str | os.PathLike[str],
        *,
        model: str | None = None,
        tail_size: int | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        http_options: HttpOptions | None = None,
        s3_settings: S3Settings | None = None,
        cache_dir: str | os.PathLike[str] | CacheStore | None = None,
        offline: bool | None = None,
        stale_if_error: bool | None = None,
        max_buffered: int | None = None,
    ) -> None:
        super().__init__()
        self._max_buffered = budget_bytes(max_buffered)
        self.location = location
        self.model = model
        self._options = OpenOptions(
            tail_size, chunk_size, http_options, s3_settings, cache_dir, offline, stale_if_error
        )
        self.load_id = uuid.uuid4().hex
        self.storage_data: dict[MetadataIndex, str] = {}
        self._handle = _Handle()
        self._finalizer = weakref.finalize(self, self._handle.close)

    # -- the archive, opened once ---------------------------------------------------------------

    @property
    def checkpoint_id(self) -> str | os.PathLike[str]:
        return self.location

    def archive(self) -> Archive | ShardedArchive:
        """The open archive (opened on first use, on the reader's loop thread)."""
        loop = self._handle.running()
        if self._handle.archive is None:
            self._handle.archive = loop.run(self._open())
        return self._handle.archive

    async def _open(self) -> Archive | ShardedArchive:
        return await self._options.open(self.location)

    @property
    def stats(self) -> dict[str, dict[str, int]]:
        """Requests made and bytes read so far by the open archive, by purpose ("open", "data")."""
        archive = self._handle.archive
        return archive.stats if archive is not None else {}

    def close(self) -> None:
        """Close the archive and stop the loop thread (a later call opens them again)."""
        self._handle.close()

    def __enter__(self) -> StorageReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the StorageReader protocol -------------------------------------------------------------

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        """A new load: with a `checkpoint_id`, of another location (the archive is opened again)."""
        if checkpoint_id is not None:
            self._handle.close_archive()
            self.location = checkpoint_id
        self.storage_data = {}
        self.load_id = uuid.uuid4().hex

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """A remote location of a scheme the reader knows, or a local file (not a folder: DCP's own
        checkpoints are folders, and FileSystemReader reads those)."""
        if not isinstance(checkpoint_id, (str, os.PathLike)):
            return False
        location = os.fspath(checkpoint_id)
        return is_remote(location) or os.path.isfile(location)

    def read_metadata(self) -> Metadata:
        """Every readable tensor of the model's checkpoint (an exported program's state dict, not its
        constants) as one chunk at offset 0 with its full sizes."""
        tensors = [info for info in checkpoint(self.archive(), self.model) if info.readable]
        described: dict[str, Any] = {}
        storage_data: dict[MetadataIndex, str] = {}
        for info in tensors:
            geometry = info.geometry
            sizes = torch.Size(geometry.sizes)
            zeros = torch.Size([0] * len(sizes))
            described[info.name] = TensorStorageMetadata(
                properties=TensorProperties(
                    dtype=dtype_of(geometry.dtype).torch, requires_grad=bool(info.requires_grad)
                ),
                size=sizes,
                chunks=[ChunkStorageMetadata(offsets=zeros, sizes=sizes)],
            )
            storage_data[MetadataIndex(info.name, zeros, 0)] = info.name
        return Metadata(
            state_dict_metadata=described,
            storage_data=storage_data,
            storage_meta=StorageMeta(checkpoint_id=self.location, load_id=self.load_id),
        )

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool) -> None:
        self.storage_data = metadata.storage_data

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """Every ReadItem's region, read as one plan and copied into `planner.resolve_tensor(item)` as
        it lands (on the calling thread); a completed Future."""
        items: dict[Region, list[ReadItem]] = {}
        for item in plan.items:
            if item.type == LoadItemType.BYTE_IO:
                raise UnsupportedPayload(
                    f"{item.storage_index.fqn!r}: a byte item; {self.location} holds tensors only"
                )
            region = Region(item.storage_index.fqn, tuple(item.storage_offsets), tuple(item.lengths))
            items.setdefault(region, []).append(item)
        if items:
            self._read(items, planner)
        done: Future[None] = Future()
        done.set_result(None)
        return done

    def _read(self, items: dict[Region, list[ReadItem]], planner: LoadPlanner) -> None:
        archive = self.archive()
        landed: queue.SimpleQueue[Any] = queue.SimpleQueue()

        def arrived(region: Region, view: TensorInfo, buffer: np.ndarray, done: Callable[[], None]) -> None:
            landed.put((region, view, buffer, done))

        async def run() -> None:
            try:
                await _read_regions(archive, list(items), arrived, self.model, Budget(self._max_buffered))
            finally:
                landed.put(_DONE)

        reading = self._handle.running().submit(run())
        try:
            while (got := landed.get()) is not _DONE:
                region, view, buffer, done = got
                for item in items[region]:
                    _copy(item, region, view, buffer, planner)
                del got, buffer
                done()  # its bytes count no more
            reading.result()
        except BaseException:
            reading.cancel()
            raise


async def _read_regions(
    archive: Archive | ShardedArchive,
    regions: list[Region],
    landed: RegionLanded,
    model: str | None,
    budget: Budget,
) -> None:
    """`read_regions` of an archive; a sharded checkpoint's shard by shard, the shards concurrently
    and sharing the budget (a failure cancels the other shards' reads)."""
    if not isinstance(archive, ShardedArchive):
        await read_regions(archive, regions, landed, model, budget)
        return
    by_shard: dict[str, tuple[Archive, list[Region]]] = {}
    for region in regions:
        shard = archive.shard_of(region.name, model=model)
        by_shard.setdefault(shard.source.location, (shard, []))[1].append(region)
    async with task_group() as group:
        for shard, part in by_shard.values():
            group.create_task(read_regions(shard, part, landed, None, budget))


def _copy(item: ReadItem, region: Region, view: TensorInfo, buffer: np.ndarray, planner: LoadPlanner) -> None:
    target = planner.resolve_tensor(item).detach()
    if tuple(target.shape) != region.lengths:
        raise RegionOutOfRange(
            f"{region.name!r}: the state dict's tensor for {item.dest_index} has shape "
            f"{tuple(target.shape)}; the region read has lengths {region.lengths}"
        )
    if not region.empty():
        target.copy_(tensor_on(torch, view, storage_of(torch, buffer)))
    planner.commit_tensor(item, target)
