"""Column blocks read a chunk of rows at a time: where one range a request means reading the rows a
block lies in (S3, any HTTP server without multi-range answers, a local file), each chunk of rows is
gathered into the block as it lands, so a rank holds its share and a few scratch buffers, never the
rows it read."""

from __future__ import annotations

import math
import pathlib
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings

import reader
from reader.loading import blocks, rowchunks
from reader.pt2 import slicing, strided
from reader.sources import S3Settings
from testing.aligned_pt2 import rank_block as _block
from testing.aligned_pt2 import write_aligned_pt2
from testing.faultserver import FaultServer
from testing.strided_views import numpy_view as _full
from testing.strided_views import tensor_info as _info
from testing.strided_views import views_and_indices

pytestmark = pytest.mark.emulator

# -- sans-IO: the chunks of rows and their gather -----------------------------------------------------


@settings(max_examples=600, deadline=None)
@given(views_and_indices())
def test_chunks_of_rows_gathered_make_the_slice(case) -> None:
    sizes, strides, offset, index = case
    end = strided.element_extent(sizes, strides, offset)[1]
    storage = np.arange(max(end, offset + 1) + 3, dtype=np.float32)
    info = _info(sizes, strides, offset, len(storage))
    try:
        want = np.ascontiguousarray(_full(storage, info)[index]).tobytes()
    except (IndexError, TypeError, ValueError):
        return
    plan = slicing.plan_slice(info, index, 1 << 30)  # every gap read through: one run
    raw = storage.tobytes()
    for limit in (1, 40, 1000, 1 << 30):
        chunks = rowchunks.row_chunks(plan, limit)
        if chunks is None:
            continue
        low, high = plan.runs[0]
        run = np.frombuffer(raw[low:high], np.uint8)
        into = np.full(plan.nbytes, 0xEE, np.uint8)
        assert chunks.rows[0][0] == 0 and chunks.rows[-1][1] == plan.shape[0]
        for (first, last), (after, _) in zip(chunks.rows, (*chunks.rows[1:], (plan.shape[0], 0))):
            assert first < last == after  # the chunks cover every row once, in order
            start = chunks.first + first * chunks.step
            length = (last - first - 1) * chunks.step + chunks.span
            assert start >= 0 and start + length <= len(run)  # a piece never reads past its run
            assert length <= max(limit, chunks.span)  # at most the limit, or one row
            rows = into[first * chunks.row_bytes : last * chunks.row_bytes]
            rowchunks.gather_rows(plan, chunks, run[start : start + length], rows)
        assert into.tobytes() == want


def test_a_column_block_comes_in_chunks_of_the_limit() -> None:
    info = _info((1000, 1024), (1024, 1), 0, 1000 * 1024)
    plan = slicing.plan_slice(info, np.s_[:, 256:512], blocks.REQUEST_GAP)
    assert len(plan.runs) == 1
    chunks = rowchunks.row_chunks(plan, 100 * 4096)
    assert chunks is not None
    assert (chunks.step, chunks.span, chunks.row_bytes) == (4096, 1024, 1024)
    assert chunks.rows[:2] == ((0, 100), (100, 200)) and len(chunks.rows) == 10


def test_rows_that_interleave_are_not_chunked() -> None:
    # a transposed view: the block's rows are columns of storage, each spanning the whole payload
    info = _info((1024, 1000), (1, 1024), 0, 1000 * 1024)
    plan = slicing.plan_slice(info, np.s_[:, 0:500], 1 << 30)
    assert rowchunks.row_chunks(plan, 1 << 20) is None


# -- loads: the right bytes, and memory bounded by the share ------------------------------------------


def _weights() -> dict[str, np.ndarray]:
    """A matrix of several chunks, one whose column blocks are apart past GAP_BYTES (a run a row), a 3-D
    weight cut along its last dim, and a vector."""
    rng = np.random.default_rng(7)
    rows = rowchunks.SCRATCH_BYTES // 4096 * 2 + 37  # 4096-byte rows: three chunks and a bit
    return {
        "big.weight": rng.standard_normal((rows, 1024), dtype=np.float32),
        "wide.weight": rng.standard_normal((64, 4096), dtype=np.float32),
        "conv.weight": rng.standard_normal((40, 50, 256), dtype=np.float32),
        "norm": rng.standard_normal(1024, dtype=np.float32),
    }


DIMS = {"big.weight": 1, "wide.weight": 1, "conv.weight": 2}


def _check(ranks: list[dict[str, np.ndarray]], truth: dict[str, np.ndarray]) -> None:
    for rank, arrays in enumerate(ranks):
        for name, array in truth.items():
            want = _block(array, rank, 4, DIMS[name]) if name in DIMS else array
            assert np.array_equal(arrays[name], want), (name, rank)
            assert arrays[name].flags.c_contiguous


async def _load_ranks(location: str, **options) -> list[dict[str, np.ndarray]]:
    ranks = []
    for rank in range(4):
        async with reader.open_archive(location, **options) as archive:
            ranks.append(await archive.load(shard=reader.Shard(rank, 4, DIMS)))
    return ranks


async def test_over_s3_chunked_blocks_are_the_blocks(tmp_path: pathlib.Path, seaweed_s3) -> None:
    truth = _weights()
    path = tmp_path / "m.pt2"
    write_aligned_pt2(path, truth)
    seaweed_s3.upload(seaweed_s3.private_bucket, "chunks/m.pt2", path)
    settings = S3Settings(region=seaweed_s3.region, endpoint=seaweed_s3.endpoint,
                          access_key=seaweed_s3.access_key, secret_key=seaweed_s3.secret_key)  # fmt: skip
    _check(await _load_ranks(f"s3://{seaweed_s3.private_bucket}/chunks/m.pt2", s3_settings=settings), truth)


async def test_a_refuted_prediction_reads_every_chunk_again(tmp_path: pathlib.Path) -> None:
    """The big matrix's data starts 64 bytes after where torch's rule puts it: its chunks read at the
    predicted offset are dropped and read again at the right one."""
    truth = _weights()
    path = tmp_path / "m.pt2"
    write_aligned_pt2(path, truth, shifted={0})
    async with FaultServer() as server:
        server.put("/m.pt2", path.read_bytes())
        _check(await _load_ranks(server.url("/m.pt2")), truth)


async def test_a_rank_holds_its_share_and_the_scratch_not_the_rows(
    tmp_path: pathlib.Path, seaweed_s3
) -> None:
    """Locally and from S3 (a server of its own: what tracemalloc counts is the load's)."""
    scratch = rowchunks.SCRATCH_BYTES * rowchunks.SCRATCH_AT_ONCE
    matrix = np.random.default_rng(9).standard_normal((scratch // 2048, 1024), np.float32)
    path = tmp_path / "m.pt2"
    write_aligned_pt2(path, {"w": matrix})  # twice the scratch buffers: a rank reads 4x its share
    seaweed_s3.upload(seaweed_s3.private_bucket, "chunks/w.pt2", path)
    settings = S3Settings(region=seaweed_s3.region, endpoint=seaweed_s3.endpoint,
                          access_key=seaweed_s3.access_key, secret_key=seaweed_s3.secret_key)  # fmt: skip
    share = matrix.nbytes // 4
    for location, options in (
        (path, {}),
        (f"s3://{seaweed_s3.private_bucket}/chunks/w.pt2", {"s3_settings": settings}),
    ):
        async with reader.open_archive(location, **options) as archive:
            tracemalloc.start()
            try:
                arrays = await archive.load(shard=reader.Shard(2, 4, {"w": 1}))
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        assert np.array_equal(arrays["w"], _block(matrix, 2, 4, 1)), location
        assert peak <= share + scratch + (8 << 20), (location, peak / 2**20, math.ceil(share / 2**20))
        assert peak < matrix.nbytes  # the rows it read were never all held
