"""The requests of a rank's blocks, planned without I/O (reader/loading/blockrequests.py): at which data
offset each entry's runs are read (confirmed, or predicted with the local header in the same requests),
where each request's bytes go, and a prediction the header refutes planned again at the offset found."""

from __future__ import annotations

import itertools
import pathlib

import numpy as np
import pytest

import reader
from reader.entries.offsets import DataOffsets
from reader.loading.blockplan import Link, Piece, Region, plan_blocks, split_by_shard
from reader.loading.blockrequests import Into, Reads, Request, RequestPlanner
from reader.zipfmt import ZipEntry, predicted_data_offset
from testing.aligned_pt2 import write_aligned_pt2
from testing.zipbytes import directory_of

pytestmark = pytest.mark.unit

SCRATCH = 64 << 10


async def _rank(
    tmp_path: pathlib.Path, dim: int, multi_range: bool
) -> tuple[RequestPlanner, dict[str, ZipEntry]]:
    """The planner of rank 1 of 4 of an archive torch's writer would lay out (four 256 x 1024 weights)."""
    rng = np.random.default_rng(7)
    arrays = {f"layer{i}.weight": rng.standard_normal((256, 1024), dtype=np.float32) for i in range(4)}
    path = tmp_path / "aligned.pt2"
    write_aligned_pt2(path, arrays)
    entries = {entry.name: entry for entry in directory_of(path.read_bytes())[1]}
    async with reader.open_archive(path) as archive:
        tensors = archive.tensors()
    _, blocks = split_by_shard(tensors, reader.Shard(1, 4, {"*.weight": dim}), entries)
    chosen = plan_blocks(blocks, Link(multi_range, rate=1e9, part_cost=1.0))  # parts cost: rows
    return RequestPlanner(chosen.blocks(blocks), chosen.parts, SCRATCH), entries


def _name(planner: RequestPlanner, piece: Piece) -> str:
    return planner.blocks[piece.block].entry.name


def _items(reads: Reads) -> list[Piece | Region]:
    return [item for request in (*reads.requests, *reads.apart) for item in request.inside]


async def test_a_first_plan_predicts_each_entry_with_its_header_and_keeps_views_in_an_aligned_arena(
    tmp_path: pathlib.Path,
) -> None:
    planner, entries = await _rank(tmp_path, 0, multi_range=False)
    reads = planner.first(DataOffsets(), True, [], False)
    names = set(planner.by_entry)
    assert len(names) == 4 and dict(reads.predicted) == {
        name: predicted_data_offset(entries[name]) for name in names
    }
    items = _items(reads)
    assert {item.entry.name for item in items if isinstance(item, Region)} == names  # each header read
    pieces = [item for item in items if isinstance(item, Piece)]
    for piece in pieces:
        assert piece.offset == reads.predicted[planner.blocks[piece.block].entry.name]
    assert all(type(request) is Request for request in reads.requests)
    kept = [request for request in reads.requests if request.into is Into.ARENA]
    assert kept and reads.arena >= sum(request.end - request.start for request in kept)
    for request in kept:  # archive offsets keep their alignment to 64 in the arena
        assert (request.slot - request.start) % 64 == 0
    for a, b in itertools.pairwise(kept):
        assert a.slot + a.end - a.start <= b.slot


async def test_a_refuted_prediction_is_planned_again_at_the_offset_found(tmp_path: pathlib.Path) -> None:
    planner, entries = await _rank(tmp_path, 0, multi_range=False)
    name = next(iter(planner.by_entry))
    found = predicted_data_offset(entries[name]) + 64
    again = planner.at_offset(name, found)
    items = _items(again)
    assert items and not dict(again.predicted) and not again.arena
    assert all(isinstance(item, Piece) and item.offset == found for item in items)
    assert {planner.blocks[item.block].entry.name for item in items} == {name}
    assert all(request.into is not Into.ARENA for request in again.requests)  # the arena is planned once
    # after a refutation the archive is no longer predicted: the other entries' headers first (a read
    # that confirms), their runs once a header says where; the refuted entry's runs where it said
    offsets = DataOffsets()
    assert not offsets.settle(entries[name], found)
    reads = planner.first(offsets, True, [], False)
    items = _items(reads)
    assert not dict(reads.predicted)
    assert {_name(planner, item) for item in items if isinstance(item, Piece)} == {name}
    assert all(item.offset == found for item in items if isinstance(item, Piece))
    assert {item.entry.name for item in items if isinstance(item, Region)} == set(planner.by_entry) - {name}


async def test_a_confirmed_offset_is_never_predicted_again(tmp_path: pathlib.Path) -> None:
    planner, entries = await _rank(tmp_path, 0, multi_range=False)
    name = next(iter(planner.by_entry))
    offsets = DataOffsets({name: predicted_data_offset(entries[name]) + 128})
    reads = planner.first(offsets, True, [], False)
    assert name not in reads.predicted and len(reads.predicted) == 3
    items = _items(reads)
    assert not any(isinstance(item, Region) and item.entry.name == name for item in items)  # no header
    mine = [item for item in items if isinstance(item, Piece) and _name(planner, item) == name]
    assert mine and all(item.offset == offsets.known(name) for item in mine)


async def test_rows_of_column_blocks_go_to_scratch_buffers_no_bigger_than_the_scratch(
    tmp_path: pathlib.Path,
) -> None:
    planner, _ = await _rank(tmp_path, 1, multi_range=False)
    assert planner.chunks  # read as rows, a chunk at a time
    reads = planner.first(DataOffsets(), True, [], False)
    rows = [request for request in reads.requests if any(getattr(item, "rows", 0) for item in request.inside)]
    assert rows and all(request.into is Into.SCRATCH for request in rows)
    assert all(request.end - request.start <= SCRATCH for request in rows)
    assert not reads.arena  # nothing is a view of what it received
    # each block's chunks of rows cover its rows once
    for index, chunks in planner.chunks.items():
        got = sorted(item.at for item in _items(reads) if isinstance(item, Piece) and item.block == index)
        assert got == [low * chunks.row_bytes for low, _ in chunks.rows]
