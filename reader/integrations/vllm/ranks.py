"""The checkpoint read once by all tensor-parallel ranks together: each rank reads the storages it
owns and hands every tensor it read to the others over the ranks' CPU process group (gloo), so each
rank still gets every tensor and vLLM's own `weight_loader`s keep choosing what a rank keeps. torch
only, no vllm: the loader passes vLLM's tensor-parallel group in.

Why this and not each rank reading its own block of each tensor: it needs no knowledge of how vLLM
splits a parameter (merged `qkv_proj`, `gate_up_proj`, replicated KV heads, ...), so it holds for
any model and can never hand a rank wrong bytes; docs/integrations.md has the measurements.

How the ranks stay in step (every rank runs the same sequence of collectives):
1. Every rank opens the archive and the ranks compare what they opened (all_gather): the same
   version (`identity`: the store's ETag / version) and the same tensor names, else every rank
   raises SourceChanged; a rank that failed to open makes every rank raise its error.
2. The storages are given to owners by size, largest first, each to the rank with the fewest bytes
   so far: the same plan on every rank, computed from what they agreed on.
3. The ranks take turns: on its turn a rank broadcasts a header (a tensor arrived / it is done / its
   reads failed) and then the tensor's bytes. A failed read (SourceChanged included: each rank's
   source stays on the agreed version) is broadcast with its message, and every rank raises it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...blocking.loop import BackgroundLoop
from ...blocking.sync import OpenOptions
from ...errors import ReaderError, SourceChanged
from ...loading.budget import budget_bytes
from ...loading.selection import checkpoint
from ...torch import iter_load
from .handover import Handover

if TYPE_CHECKING:
    import torch

logger = logging.getLogger("vllm.pt2serve")

_DONE = object()
_TENSOR, _FINISHED, _FAILED = 0, 1, 2
_MAX_DIMS = 64  # torch's own limit on a tensor's dimensions
_HEADER = 4 + _MAX_DIMS  # status, name index, dtype index, ndim, sizes


class RankReadFailed(ReaderError):
    """Another rank's read failed (its error's type and message in this message), so this rank's
    load fails too: no rank goes on with a part of the checkpoint."""


@dataclass(frozen=True)
class RankGroup:
    """The tensor-parallel ranks: their CPU process group, the global rank of each, and this one's
    place among them."""

    group: Any  # torch.distributed.ProcessGroup
    ranks: Sequence[int]
    rank: int

    @property
    def size(self) -> int:
        return len(self.ranks)


def owners(storages: Sequence[tuple[str, int]], size: int) -> dict[str, int]:
    """Each storage (key, bytes) to the rank that reads it: largest first, to the rank holding the
    fewest bytes so far (ties: the lowest rank, then the key), so the ranks read about equal shares."""
    held = [0] * size
    chosen: dict[str, int] = {}
    for key, nbytes in sorted(storages, key=lambda item: (-item[1], item[0])):
        rank = min(range(size), key=lambda place: (held[place], place))
        chosen[key] = rank
        held[rank] += nbytes
    return chosen


def iter_shared_weights(
    locations: Sequence[str],
    group: RankGroup,
    *,
    options: OpenOptions | None = None,
    verify: bool | None = None,
    max_buffered: int | None = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Every readable tensor of the checkpoint of each archive at `locations`, as `iter_weights`
    gives them, with this rank reading about 1/size of the bytes and receiving the rest; its own
    reads run at most `max_buffered` bytes ahead (None: PT2SERVE_MAX_BUFFERED, else the default)."""
    budget = budget_bytes(max_buffered, "max_buffered")
    opener = options or OpenOptions()
    loop = BackgroundLoop("pt2serve-vllm-ranks")
    try:
        for location in locations:
            yield from _shared_location(loop, location, group, options=opener, verify=verify, budget=budget)
    finally:
        loop.close()  # cancels what is still being read, and ends the thread


def _shared_location(
    loop: BackgroundLoop,
    location: str,
    group: RankGroup,
    *,
    options: OpenOptions,
    verify: bool | None,
    budget: int,
) -> Iterator[tuple[str, torch.Tensor]]:
    import torch

    arrived = Handover(loop)  # this rank's own reads, one tensor at a time within the budget
    decided: concurrent.futures.Future[list[str]] = concurrent.futures.Future()

    async def read() -> None:
        """Open, say what was opened, wait for this rank's share, read it as it lands."""
        async with options.open(location) as archive:
            infos = [info for info in checkpoint(archive) if info.readable]
            arrived.end((archive.source.identity, archive.source.location, infos))
            names = await asyncio.wrap_future(decided)
            if names:
                tensors = iter_load(archive, names=names, verify=verify, max_buffered=budget)
                async with contextlib.aclosing(tensors):
                    async for item in tensors:
                        await arrived.put(item)

    reading = loop.submit(read())
    reading.add_done_callback(lambda done: arrived.end(_outcome(done)))  # after all it put
    try:
        opened = arrived.get()
        if not isinstance(opened, tuple):  # the open failed: every rank must learn of it first
            error = opened if isinstance(opened, BaseException) else ReaderError("nothing opened")
            _agree(group, None, error)
            raise error
        identity, shown, infos = opened
        names = [info.name for info in infos]
        _agree(group, (identity, names), None)
        sizes: dict[str, int] = {}
        for info in infos:
            sizes[info.storage.entry] = max(sizes.get(info.storage.entry, 0), info.storage.nbytes)
        owner = owners(list(sizes.items()), group.size)
        mine = [info.name for info in infos if owner[info.storage.entry] == group.rank]
        logger.info(
            "pt2serve: tensor-parallel rank %d of %d reads %d of %d tensors (%d of %d bytes) of %s",
            group.rank, group.size, len(mine), len(names),
            sum(nbytes for key, nbytes in sizes.items() if owner[key] == group.rank), sum(sizes.values()),
            shown,
        )  # fmt: skip
        decided.set_result(mine)
        yield from _exchange(torch, group, names, arrived)
    finally:
        decided.cancel()  # a no-op once set
        reading.cancel()  # a no-op once done


def _outcome(done: concurrent.futures.Future[None]) -> Any:
    """What ends a rank's reads: _DONE, or the error they stopped with."""
    if done.cancelled():
        return ReaderError("the reads were cancelled")
    return done.exception() or _DONE


def _exchange(
    torch: Any, group: RankGroup, names: list[str], arrived: Handover
) -> Iterator[tuple[str, torch.Tensor]]:
    """The ranks' turns, round-robin among those not done, until every rank is done."""
    import torch.distributed as dist

    index = {name: place for place, name in enumerate(names)}
    active = list(range(group.size))
    turn = 0
    while active:
        sender = active[turn % len(active)]
        header = torch.zeros(_HEADER, dtype=torch.int64)
        if sender == group.rank:
            item = arrived.get()
            if item is _DONE:
                header[0] = _FINISHED
            elif isinstance(item, BaseException):
                header[0] = _FAILED
            else:
                name, tensor = item
                header[:4] = torch.tensor([_TENSOR, index[name], _dtypes().index(tensor.dtype), tensor.dim()])
                header[4 : 4 + tensor.dim()] = torch.tensor(tensor.shape, dtype=torch.int64)
        dist.broadcast(header, src=group.ranks[sender], group=group.group)
        status = int(header[0])
        if status == _FINISHED:
            active.remove(sender)
            continue  # the next rank in the cycle now sits at `turn`
        if status == _FAILED:
            message = [f"{type(item).__name__}: {item}" if sender == group.rank else None]
            dist.broadcast_object_list(message, src=group.ranks[sender], group=group.group)
            if sender == group.rank:
                raise item
            raise _rank_error(sender, message[0])
        if sender == group.rank:
            _broadcast_bytes(torch, dist, tensor.contiguous(), group, sender)
        else:
            shape = [int(size) for size in header[4 : 4 + int(header[3])]]
            tensor = torch.empty(shape, dtype=_dtypes()[int(header[2])])
            _broadcast_bytes(torch, dist, tensor, group, sender)
            name = names[int(header[1])]
        yield name, tensor
        if sender == group.rank:
            del tensor, item
            arrived.done()  # vLLM is done with this rank's own tensor: its reads go on
        turn += 1


def _broadcast_bytes(torch: Any, dist: Any, tensor: torch.Tensor, group: RankGroup, sender: int) -> None:
    """The tensor's bytes from `sender` into every rank's `tensor` (contiguous), as bytes: gloo
    carries every dtype so."""
    if tensor.numel() == 0:
        return
    raw = tensor.reshape(-1).view(torch.uint8)
    dist.broadcast(raw, src=group.ranks[sender], group=group.group)


def _agree(group: RankGroup, opened: tuple[str, list[str]] | None, error: BaseException | None) -> None:
    """Every rank's archive is the same version with the same names, or every rank raises."""
    import torch.distributed as dist

    mine = (None, f"{type(error).__name__}: {error}") if error is not None else (opened, None)
    everyone: list[Any] = [None] * group.size
    dist.all_gather_object(everyone, mine, group=group.group)
    failed = [(rank, message) for rank, (_, message) in enumerate(everyone) if message is not None]
    if failed:
        if error is not None:
            return  # the caller raises its own error
        rank, message = failed[0]
        raise _rank_error(rank, message)
    versions = {identity for (identity, _), _ in everyone}
    if len(versions) > 1 or any(names != opened[1] for (_, names), _ in everyone):  # type: ignore[index]
        raise SourceChanged(  # the identities are not shown: a presigned URL's carries credentials
            f"the {group.size} tensor-parallel ranks opened {len(versions)} different versions of the "
            "checkpoint (or different tensors): it changed while they opened it; load again"
        )


def _rank_error(rank: int, message: str) -> ReaderError:
    """What this rank raises for another rank's failure: SourceChanged stays SourceChanged."""
    text = f"tensor-parallel rank {rank} failed: {message}"
    return SourceChanged(text) if message.startswith("SourceChanged:") else RankReadFailed(text)


@functools.cache
def _dtypes() -> tuple[torch.dtype, ...]:
    """torch's dtypes in one order every rank shares (the same torch)."""
    import torch

    return tuple(sorted({value for value in vars(torch).values() if isinstance(value, torch.dtype)}, key=str))
