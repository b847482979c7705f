"""How a rank's column blocks are read, chosen without I/O (reader/loading/blockplan.py): their runs as
the parts of multi-range requests, or the rows they lie in, whichever costs less at the link's rate."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from reader.loading import blockplan
from reader.loading.blockplan import Block, Link, Way, cut_block, plan_blocks
from reader.pt2.tensorinfo import StorageRef, TensorInfo
from reader.zipfmt import ZipEntry
from reader.zipfmt.structs import METHOD_DEFLATED, METHOD_STORED

pytestmark = pytest.mark.unit

# GPT-2's 2-D weights (Conv1D: in x out), float32
GPT2 = {
    "wte": (50257, 768),
    "c_attn": (768, 2304),
    "c_fc": (768, 3072),
    "c_proj": (3072, 768),
    "attn": (768, 768),
}
LOOPBACK = 1.5e9  # bytes/s of one loopback connection, about
WAN = 20e6
COST = 7e-6  # seconds a part, about, on a quiet host here


def _block(
    name: str, shape: tuple[int, int], dim: int, *, rank: int = 1, world: int = 4, method: int = METHOD_STORED
):
    nbytes = math.prod(shape) * 4
    key = f"archive/data/{name}"
    storage = StorageRef(key, 0, nbytes, "stored" if method == METHOD_STORED else "deflate", 0)
    info = TensorInfo(
        name, "model", "weight", "float32", shape, (shape[1], 1), 0, (0, 1), True, math.prod(shape),
        4, nbytes, True, False, False, None, storage,
    )  # fmt: skip
    entry = ZipEntry(key, key.encode(), 0, method, 0, nbytes, nbytes, 0, nbytes + 128, storage.compression)
    step = -(-shape[dim] // world)
    index = [slice(None), slice(None)]
    index[dim] = slice(rank * step, min((rank + 1) * step, shape[dim]))
    return cut_block(info, tuple(index), entry)


def _rank(dim: int) -> list[Block]:
    return [_block(name, shape, dim) for name, shape in GPT2.items()]


def test_gpt2_dim_1_at_loopback_rates_reads_rows() -> None:
    blocks = _rank(1)
    chosen = plan_blocks(blocks, Link(True, rate=LOOPBACK, part_cost=COST))
    ways = {block.info.name: choice.way for block, choice in zip(blocks, chosen.choices, strict=True)}
    assert ways["wte"] is Way.ROWS and ways["c_proj"] is Way.ROWS  # 768-byte runs: 50k and 3k parts
    parts = sum(len(choice.plan.runs) for choice in chosen.choices if choice.way is Way.PARTS)
    assert parts < 5000  # against 134k as parts (every choice its cheaper way)
    for choice in chosen.choices:
        assert choice.priced is not None
        cheaper = Way.ROWS if choice.priced.rows < choice.priced.parts else Way.PARTS
        assert choice.way is cheaper


def test_gpt2_dim_1_over_a_slow_link_reads_parts() -> None:
    blocks = _rank(1)
    chosen = plan_blocks(blocks, Link(True, rate=WAN, part_cost=COST))
    assert [choice.way for choice in chosen.choices] == [Way.PARTS] * len(blocks)
    assert chosen.parts == frozenset(range(len(blocks)))
    read = sum(choice.plan.read_bytes for choice in chosen.choices)
    assert read == sum(block.info.nbytes for block in blocks)  # the share, nothing between the runs


def test_small_column_blocks_at_low_rates_read_parts_and_rows_at_high() -> None:
    block = _block("small", (256, 1024), 1)  # 256 runs of 1 KiB, 3 KiB apart
    assert plan_blocks([block], Link(True, rate=50e6, part_cost=COST)).choices[0].way is Way.PARTS
    assert plan_blocks([block], Link(True, rate=20e9, part_cost=COST)).choices[0].way is Way.ROWS


def test_parts_that_cost_nothing_are_always_read_and_a_costly_part_never() -> None:
    blocks = _rank(1)
    free = plan_blocks(blocks, Link(True, rate=100e9, part_cost=0.0))
    assert {choice.way for choice in free.choices} == {Way.PARTS}
    dear = plan_blocks(blocks, Link(True, rate=1e9, part_cost=1.0))
    assert {choice.way for choice in dear.choices} == {Way.ROWS}


def test_rows_are_the_one_run_the_rows_lie_in_and_parts_the_runs() -> None:
    block = _block("c_proj", GPT2["c_proj"], 1)
    rows = plan_blocks([block], Link(True, rate=20e9, part_cost=COST)).choices[0]
    assert rows.way is Way.ROWS and len(rows.plan.runs) == 1 and rows.plan is block.plan  # as cut
    low, high = rows.plan.runs[0]
    assert low == 192 * 4 and high == (3071 * 768 + 384) * 4  # row 0's piece to row 3071's
    (read,) = plan_blocks([block], Link(True, rate=20e9, part_cost=COST)).blocks([block])
    assert read.gathered and read.plan is rows.plan
    parts = plan_blocks([block], Link(True, rate=WAN, part_cost=COST)).choices[0]
    assert parts.way is Way.PARTS and len(parts.plan.runs) == 3072
    assert all(high - low == 768 for low, high in parts.plan.runs)


def test_without_multi_range_column_blocks_read_rows_whatever_the_rate() -> None:
    for rate in (None, 1e3, 1e12):
        chosen = plan_blocks(_rank(1), Link(False, rate=rate, part_cost=0.0))
        assert {choice.way for choice in chosen.choices} <= {Way.AS_CUT, Way.ROWS}  # (rows as cut or joined)
        assert all(len(choice.plan.runs) == 1 for choice in chosen.choices)
    assert not blockplan.needs_timing(_rank(1), Link(False))


def test_dim_0_blocks_are_read_as_cut_and_need_no_rate() -> None:
    blocks = _rank(0)
    for link in (
        Link(True, rate=LOOPBACK, part_cost=COST),
        Link(True, rate=WAN, part_cost=COST),
        Link(False),
        Link(True),
    ):
        chosen = plan_blocks(blocks, link)
        assert {choice.way for choice in chosen.choices} == {Way.AS_CUT}
        assert chosen.blocks(blocks) == blocks
    assert not blockplan.needs_timing(blocks, Link(True))


def test_a_column_block_with_the_link_not_known_is_timed_first_else_read_as_parts() -> None:
    blocks = _rank(1)
    assert blockplan.needs_timing(blocks, Link(True))
    assert blockplan.needs_timing(blocks, Link(True, rate=LOOPBACK))  # a part's cost still unknown
    assert blockplan.needs_timing(blocks, Link(True, part_cost=COST))  # the rate still unknown
    assert not blockplan.needs_timing(blocks, Link(True, rate=LOOPBACK, part_cost=COST))
    assert not blockplan.needs_timing(blocks, Link(True, part_cost=0.0))  # parts then, whatever the rate
    where = blockplan.probe(blocks)
    wte = blocks[0].entry
    assert where is not None and (where.start, where.end) == (
        wte.header_offset,
        wte.region_end,
    )  # the biggest
    assert len(where.parts) == blockplan.PROBE_PARTS  # its first runs, as parts
    assert where.parts[-1][1] - where.parts[0][0] <= blockplan.PROBE_PART_BYTES
    assert all(high - low == 768 and high <= wte.region_end for low, high in where.parts)
    assert blockplan.probe(_rank(0)) is None
    assert {choice.way for choice in plan_blocks(blocks, Link(True)).choices} == {Way.PARTS}


def test_a_deflate_column_block_is_inflated_as_cut() -> None:
    block = _block("c_fc", GPT2["c_fc"], 1, method=METHOD_DEFLATED)
    for link in (Link(True, rate=LOOPBACK, part_cost=COST), Link(False)):
        assert plan_blocks([block], link).choices[0].way is Way.AS_CUT
    assert not blockplan.needs_timing([block], Link(True))


def test_the_chosen_plans_select_the_block() -> None:
    storage = np.arange(768 * 2304, dtype=np.float32)
    block = _block("c_attn", GPT2["c_attn"], 1, rank=2)
    want = storage.reshape(768, 2304)[:, 1152:1728]
    raw = storage.view(np.uint8)
    for link in (Link(True, rate=WAN, part_cost=COST), Link(False)):
        (read,) = plan_blocks([block], link).blocks([block])
        runs = np.concatenate([raw[low:high] for low, high in read.plan.runs])
        if read.gathered:
            from reader.pt2.slicing import gather_into

            out = np.empty(read.plan.nbytes, np.uint8)
            gather_into(runs, read.plan, out)
            runs = out
        assert np.array_equal(runs.view(np.float32).reshape(768, 576), want), link


def test_runs_requests_cover_each_run_once_in_order_and_a_tied_block_is_a_twin() -> None:
    first = _block("c_fc", GPT2["c_fc"], 1)
    tied = _block("c_fc", GPT2["c_fc"], 1)  # the same entry and cut: another name for it
    blocks = plan_blocks([first, tied], Link(True, rate=WAN, part_cost=COST)).blocks([first, tied])
    planned = blockplan.runs_requests(blocks, [(0, 4096), (1, 4096)])
    assert dict(planned.twins) == {0: (1,)} and not planned.apart
    parts = [part for batch in planned.batches for part in batch]
    assert {part.block for part in parts} == {0}
    assert parts[0].low == 0 and parts[-1].high == len(blocks[0].plan.runs)
    assert all(a.high == b.low for a, b in itertools.pairwise(parts))  # each run once, in order
    widths = [high - low for low, high in blocks[0].plan.runs]
    assert all(part.at == sum(widths[: part.low]) for part in parts)  # where its runs go in the buffer
    assert all(part.offset == 4096 for part in parts)


def test_a_part_cost_below_zero_is_refused_and_none_means_timed() -> None:
    from reader.sources import HttpOptions

    with pytest.raises(ValueError, match="part_cost"):
        HttpOptions(part_cost=-1e-6)
    assert HttpOptions().part_cost is None and HttpOptions(part_cost=0.0).part_cost == 0.0
