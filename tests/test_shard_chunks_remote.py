"""A column block's rows read a chunk at a time from S3 and HTTP servers (the sans-IO chunking:
test_shard_chunks.py)."""

from __future__ import annotations

import math
import pathlib
import tracemalloc

import numpy as np
import pytest

import reader
from reader.loading import rowchunks
from reader.sources import S3Settings
from testing.aligned_pt2 import rank_block as _block
from testing.aligned_pt2 import write_aligned_pt2
from testing.faultserver import FaultServer

pytestmark = pytest.mark.emulator


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
