"""`Archive.load` and `Archive.iter_load`: the selection, then the plan, the storages and the arrays."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

import numpy as np

from ..pt2.tensorinfo import TensorInfo
from ..sources import ByteSource
from ..tasks import task_group
from ..zipfmt import ZipEntry
from .arrays import view_array
from .blockplan import SMALL_WHOLE, Block, set_small_apart, split_by_shard
from .blocks import read_blocks
from .budget import Budget, Ledger, budget_bytes
from .plan import LoadPlan, plan_load
from .selection import Loadable, Payloads, Selection
from .storages import Buffers, Landed, read_storages


async def load_storages(archive: Loadable, selection: Selection) -> tuple[LoadPlan, Buffers]:
    """The plan for a selection and its storages' bytes (what reader.torch builds on too): whole
    storages by entry name, a shard's blocks by their keys."""
    payloads = archive._payloads()
    plan, blocks = _plan(archive, payloads, selection)
    return plan, await read_planned(payloads, plan, blocks, selection)


def _plan(archive: Loadable, payloads: Payloads, selection: Selection) -> tuple[LoadPlan, list[Block]]:
    """The storages to read whole and the blocks to read in part; `plan.tensors` lists the tensors
    (blocks as views of their own buffers) in the caller's order."""
    tensors = selection.tensors(archive)
    if selection.shard is None:
        return plan_load(tensors, payloads.entries), []
    ordered, blocks = split_by_shard(tensors, selection.shard, payloads.entries)
    cut = {block.key for block in blocks}
    plan = plan_load([info for info in ordered if info.storage.entry not in cut], payloads.entries)
    return dataclasses.replace(plan, tensors=tuple(ordered)), blocks


async def read_planned(
    payloads: Payloads,
    plan: LoadPlan,
    blocks: list[Block],
    selection: Selection,
    landed: Landed | None = None,
    ledger: Ledger | None = None,
) -> Buffers:
    """The plan's storages and the blocks' buffers, read at once; `landed` hears of each as it lands.
    With a `ledger`, the whole storages of a remote source are read within its budget (a shard's
    blocks are not counted)."""
    source, fetcher = payloads.source, payloads.fetcher
    nearby: list[ZipEntry] = []
    if blocks and not source.local:  # requests cost: small ones join the headers
        plan, nearby = set_small_apart(plan, SMALL_WHOLE)
    whole = read_storages(
        source, fetcher, plan, copy=selection.copy, verify=selection.verify, landed=landed, ledger=ledger
    )
    if not blocks:
        return await whole
    async with task_group() as group:  # the first failure cancels the rest
        storages = group.create_task(whole)
        parts = group.create_task(
            read_blocks(source, fetcher, blocks, landed or _ignore, nearby, payloads.entries)
        )
    return {**storages.result(), **parts.result()}


def _ignore(buffers: Buffers) -> None:
    pass


async def iter_storages(
    archive: Loadable, selection: Selection, max_buffered: int | None = None
) -> AsyncIterator[tuple[list[TensorInfo], np.ndarray]]:
    """The same plan and reads as `load_storages`, handed over as they land: each storage (once it
    is in and checked) with the selected tensors that view it, in completion order. A failure of
    any read is raised here; leaving the loop early (aclose) cancels what is still being read.

    Memory (remote sources): the storages read but not yet handed over, plus those being read, hold
    at most `max_buffered` bytes (reader.loading.budget; None: PT2SERVE_MAX_BUFFERED or the
    default). A range's bytes are given back when the consumer comes back for more after its last
    storage, so a consumer that drops each tensor keeps the load within the budget, and one that
    stops asking stops the reads. A storage bigger than the budget is read alone."""
    ledger = Ledger(Budget(budget_bytes(max_buffered)))
    payloads = archive._payloads()
    plan, blocks = _plan(archive, payloads, selection)
    views: dict[str, list[TensorInfo]] = {}
    for info in plan.tensors:
        views.setdefault(info.storage.entry, []).append(info)
    arrived: asyncio.Queue[Buffers] = asyncio.Queue()
    reading = asyncio.ensure_future(
        read_planned(payloads, plan, blocks, selection, arrived.put_nowait, ledger)
    )
    try:
        while views:
            batch = await _next_batch(arrived, reading)
            while batch:
                name = next(iter(batch))  # in the order they landed
                buffer = batch.pop(name)
                yield views.pop(name), buffer
                del buffer  # the consumer came back: what it dropped is free
                ledger.consumed([name])
    finally:
        ledger.release_all()
        if not reading.done():
            reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading  # a failure after the last storage was handed over still counts


async def _next_batch(arrived: asyncio.Queue[Buffers], reading: asyncio.Future[Buffers]) -> Buffers:
    """The next batch of storages, or the reads' failure; never waits on a read that ended."""
    if arrived.empty():
        waiting = asyncio.ensure_future(arrived.get())
        try:
            await asyncio.wait((waiting, reading), return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
        if waiting.done() and not waiting.cancelled():
            return waiting.result()
    if not arrived.empty():
        return arrived.get_nowait()
    reading.result()  # raises the reads' failure
    raise AssertionError("the reads ended with storages still to hand over")


def read_only(source: ByteSource, buffer: np.ndarray) -> np.ndarray:
    """A storage as arrays see it: a view of a mapped local file is read-only, as documented."""
    if source.mappable and not buffer.flags.owndata:
        buffer.flags.writeable = False
    return buffer


async def load_arrays(archive: Loadable, selection: Selection) -> dict[str, np.ndarray]:
    plan, buffers = await load_storages(archive, selection)
    source = archive._payloads().source
    for buffer in buffers.values():
        read_only(source, buffer)
    return {
        info.name: view_array(info, buffers[info.storage.entry], selection.order) for info in plan.tensors
    }


async def iter_arrays(
    archive: Loadable, selection: Selection, max_buffered: int | None = None
) -> AsyncIterator[tuple[str, np.ndarray]]:
    """`load_arrays`' arrays as their storages land, within `max_buffered` (see `iter_storages`)."""
    source = archive._payloads().source
    storages = iter_storages(archive, selection, max_buffered)
    async with contextlib.aclosing(storages):  # closed with this one
        async for infos, buffer in storages:
            read_only(source, buffer)
            for info in infos:
                yield info.name, view_array(info, buffer, selection.order)
            del buffer
