"""reader.compare.plan without I/O: which names the metadata decides, which pairs are read, and how
(batched by file and distance, sampled or streamed)."""

from __future__ import annotations

import pytest

from reader.compare.model import TensorDiff
from reader.compare.plan import (
    BATCH_BYTES,
    SAMPLE_BLOCK_BYTES,
    SAMPLE_BLOCKS,
    SMALL_TENSOR,
    Batch,
    Move,
    Placement,
    Single,
    Undecided,
    list_names,
    sample_starts,
    schedule,
    settle_moves,
)
from reader.pt2.tensorinfo import StorageRef, TensorInfo

pytestmark = pytest.mark.unit


def info(
    name: str,
    *,
    crc: int = 1,
    numel: int = 4,
    dtype: str = "float32",
    strides: tuple[int, ...] | None = None,
    unsupported: str | None = None,
    model: str = "model",
) -> TensorInfo:
    """A dense 1-D float32 tensor viewing all of its payload (entry named after the tensor)."""
    return TensorInfo(
        name=name, model=model, kind="weight", dtype=dtype, sizes=(numel,), strides=strides or (1,),
        storage_offset=0, dim_order=(0,), dense=strides in (None, (1,)), numel=numel, itemsize=4,
        nbytes=4 * numel, is_param=True, requires_grad=False, pickled=False, executorch_scalar_type=None,
        storage=StorageRef(entry=f"data/{name}", offset=0, nbytes=4 * numel, compression="stored", crc32=crc),
        unsupported=unsupported,
    )  # fmt: skip


def statuses(rows) -> list[tuple[str, str]]:
    return [(r.name, r.status if isinstance(r, TensorDiff) else "?") for r in rows]


def test_metadata_decides_same_retyped_added_and_unreadable_and_leaves_the_rest_undecided():
    a = [info("same", crc=7), info("edited", crc=1), info("cast"), info("opaque", crc=1), info("gone")]
    b = [
        info("same", crc=7),
        info("edited", crc=2),
        info("cast", dtype="float64"),
        info("opaque", crc=2, unsupported="a custom object"),
        info("fresh"),
    ]
    listing = list_names(a, b, prefix=None)
    assert statuses(listing.rows) == [
        ("same", "same"), ("edited", "?"), ("cast", "retyped"), ("opaque", "changed"), ("fresh", "added"),
    ]  # fmt: skip
    assert listing.rows[0].proof == "crc32" and "a custom object" in listing.rows[3].note
    assert listing.rows[1].order == "default"
    assert [t.name for t in listing.removed] == ["gone"] and [t.name for t in listing.added] == ["fresh"]


def test_views_that_differ_are_read_row_major_so_elements_pair_up():
    listing = list_names([info("w", crc=1)], [info("w", crc=2, strides=(2,))], prefix=None)
    assert listing.rows[0].order == "contiguous"


def test_prefix_keeps_only_those_names_on_both_sides():
    listing = list_names([info("x.w"), info("y.w")], [info("y.w", crc=3), info("z.w")], prefix="y.")
    assert statuses(listing.rows) == [("y.w", "?")] and listing.removed == ()


def test_a_move_replaces_the_added_row_and_drops_the_removed_one():
    old, other = info("old"), info("other")
    listing = list_names([old, other], [info("new")], prefix=None)
    rows = settle_moves(listing, {"new": Move(old, "sha256")})
    assert statuses(rows) == [("new", "moved"), ("other", "removed")]
    assert (rows[0].moved_from, rows[0].proof, rows[0].a) == ("old", "sha256", old)
    assert listing.rows[0].status == "added"  # the listing itself is unchanged


def _undecided(sizes: list[int]) -> list[tuple[int, Undecided]]:
    return [
        (slot, Undecided(info(f"t{slot}", numel=n // 4), info(f"t{slot}", numel=n // 4, crc=9), "default"))
        for slot, n in enumerate(sizes)
    ]


def test_small_tensors_are_batched_by_file_and_distance_large_ones_alone():
    pairs = _undecided([64, 64, 64, 64, SMALL_TENSOR + 4])
    placements = {
        0: Placement("a0", 0, "b0", 0),
        1: Placement("a0", 100, "b0", 100),  # close to 0 in both files: one batch
        2: Placement("a0", 200 + BATCH_BYTES, "b0", 200),  # far on side a: a new batch
        3: Placement("a1", 100, "b0", 100),  # another file (a shard) on side a
        4: Placement("a0", 0, "b0", 0),
    }
    jobs = schedule(pairs, placements, exact=False, sample_above=1 << 30)
    batches = [[slot for slot, _ in job.members] for job in jobs if isinstance(job, Batch)]
    assert sorted(batches) == [[0, 1], [2], [3]]
    assert jobs[-1] == Single(4, pairs[4][1], sample=False)


def test_large_tensors_are_sampled_above_the_threshold_and_the_sample_unless_exact():
    sample = SAMPLE_BLOCKS * SAMPLE_BLOCK_BYTES
    pairs = _undecided([sample + 4, 2 * sample])
    placements = {slot: Placement(0, 0, 0, 0) for slot, _ in pairs}
    by_slot = {job.slot: job.sample for job in schedule(pairs, placements, exact=False, sample_above=0)}
    assert by_slot == {0: True, 1: True}
    by_slot = {
        job.slot: job.sample for job in schedule(pairs, placements, exact=False, sample_above=sample + 4)
    }
    assert by_slot == {0: False, 1: True}
    assert not any(job.sample for job in schedule(pairs, placements, exact=True, sample_above=0))


def test_the_sample_spans_the_tensor_in_whole_elements():
    length, itemsize = 100 << 20, 2
    starts, block = sample_starts(length, itemsize)
    assert block == SAMPLE_BLOCK_BYTES and len(starts) == SAMPLE_BLOCKS
    assert starts[0] == 0 and starts[-1] + block == length
    assert all(s % itemsize == 0 for s in starts) and starts == sorted(set(starts))
