"""Boxes of tensors (a torch.distributed.checkpoint rank's ReadItems): only their bytes, one plan.

A region is a box of a tensor: per dim an offset and a length (DCP's `storage_offsets` and
`lengths`). A region that is the whole tensor is read as its whole storage (CRC-checked, mapped
locally), as a load reads it; any other is a block (blocks.py): its runs, coalesced with every other
region's into as few ranged requests as the store allows, read at once with the whole storages (the
same `read_planned` a sharded load goes through). Each region's bytes are handed over as they land.
One archive's regions: a sharded checkpoint's are split by shard above this layer (reader/dcp.py).

Memory (remote sources): the whole storages read but not yet copied out, and those being read, hold
at most a `Budget` (reader/loading/budget.py; the shards share it): `landed`'s `done` says a region
was copied out, and a range's bytes are given back once every region it holds was. The blocks of
partial regions are a rank's own part and are not counted.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ReaderError
from ..pt2.tensorinfo import TensorInfo
from .blockplan import Block, cut_block
from .budget import Budget, Ledger, budget_bytes
from .load import read_planned
from .plan import plan_load
from .selection import Loadable, Selection


class RegionOutOfRange(ReaderError, IndexError):
    """A region that is not inside its tensor: another rank, offsets past the end, the wrong dims."""


@dataclass(frozen=True, slots=True)
class Region:
    """Elements [offsets[d], offsets[d] + lengths[d]) of each dim d of tensor `name`."""

    name: str
    offsets: tuple[int, ...]
    lengths: tuple[int, ...]

    def index(self) -> tuple[slice, ...]:
        """As NumPy basic indexing: `full[region.index()]` is the region."""
        return tuple(
            slice(start, start + length) for start, length in zip(self.offsets, self.lengths, strict=True)
        )

    def check(self, info: TensorInfo) -> None:
        """RegionOutOfRange unless the region lies inside `info`'s shape, naming the tensor
        (UnsupportedPayload for a tensor whose bytes cannot be read)."""
        sizes = info.geometry.sizes
        inside = len(self.offsets) == len(self.lengths) == len(sizes) and all(
            start >= 0 and length >= 0 and start + length <= size
            for start, length, size in zip(self.offsets, self.lengths, sizes, strict=True)
        )
        if not inside:
            raise RegionOutOfRange(
                f"{self.name!r} has shape {sizes}; the region asked for (offsets {self.offsets}, "
                f"lengths {self.lengths}) is not inside it"
            )

    def whole(self, info: TensorInfo) -> bool:
        return not any(self.offsets) and self.lengths == info.geometry.sizes

    def empty(self) -> bool:
        return 0 in self.lengths


# Hears of each region once its bytes are in: the region, a TensorInfo viewing `buffer` (its sizes,
# strides, storage offset in elements), the buffer (read-only: copy out of it), and `done`, to call
# (from any thread) once it was copied out: what the region held counts against the budget till then.
RegionLanded = Callable[[Region, TensorInfo, np.ndarray, Callable[[], None]], None]


async def read_regions(
    archive: Loadable,
    regions: Sequence[Region],
    landed: RegionLanded,
    model: str | None = None,
    budget: Budget | None = None,
) -> None:
    """Every region's bytes, handed to `landed` as they land; a region of no bytes (a length 0) is
    handed over at once. TensorNotFound for a name the model lacks, RegionOutOfRange for a region
    outside its tensor, both before anything is read. `budget`: None reads PT2SERVE_MAX_BUFFERED,
    else the default."""
    budget = budget or Budget(budget_bytes(None))
    payloads = archive._payloads()
    views: dict[str, list[tuple[Region, TensorInfo]]] = {}  # buffer key -> the regions it holds
    whole: dict[tuple[str, str], TensorInfo] = {}
    blocks: dict[str, Block] = {}
    infos = [(region, archive.layout(region.name, model=model)) for region in regions]
    for region, info in infos:  # every region checked before anything is read
        region.check(info)
    for region, info in infos:
        if region.empty():
            landed(region, info, np.empty(0, np.uint8), _nothing)
        elif region.whole(info):
            whole.setdefault((info.model, info.name), info)
            views.setdefault(info.storage.entry, []).append((region, info))
        else:
            key = f"{info.storage.entry}#{info.model}/{info.name}@{region.offsets}+{region.lengths}"
            if key not in blocks:
                blocks[key] = cut_block(info, region.index(), payloads.entries[info.storage.entry], key)
            views.setdefault(key, []).append((region, blocks[key].info))

    ledger = Ledger(budget)
    loop = asyncio.get_running_loop()
    copying = {key: len(held) for key, held in views.items()}  # regions not yet copied out, by buffer

    def copied(key: str) -> None:  # on the loop
        copying[key] -= 1
        if not copying[key]:
            ledger.consumed([key])

    def arrived(buffers: dict[str, np.ndarray]) -> None:
        for key, buffer in buffers.items():
            done = functools.partial(loop.call_soon_threadsafe, copied, key)
            for region, view in views.get(key, ()):
                landed(region, view, buffer, done)

    if views:
        plan = plan_load(list(whole.values()), payloads.entries)
        try:
            await read_planned(payloads, plan, list(blocks.values()), Selection(), arrived, ledger)
        finally:
            ledger.release_all()


def _nothing() -> None:
    pass
