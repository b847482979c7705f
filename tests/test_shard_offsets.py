"""A rank's block requests start at once, at each entry's predicted data offset (torch's ZIP writer
pads every local header so data starts at a multiple of 64), and count only once the entry's local
header confirms the offset: a header that disagrees gets the block read again, never wrong bytes.
The prediction against torch's own files is in test_shard_offsets_rules.py."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import reader
from reader.sources import HttpOptions
from testing.aligned_pt2 import rank_block as _block
from testing.aligned_pt2 import write_aligned_pt2
from testing.faultserver import FaultServer
from testing.shard_blocks import matrix_arrays

pytestmark = pytest.mark.emulator


OPTIONS = HttpOptions(parallel_parts=4, part_size=1 << 16, parallel_above=1 << 16, fast_connection=None)


async def _ranks(location: str, dim: int) -> list[tuple[dict[str, np.ndarray], int, int]]:
    """Each rank's (arrays, bytes read, requests made) for its load."""
    results = []
    for rank in range(4):
        async with reader.open_archive(location, http_options=OPTIONS) as archive:
            before = archive.stats.get("data", {"bytes": 0, "requests": 0})
            arrays = await archive.load(shard=reader.Shard(rank, 4, {"layer*": dim}))
            after = archive.stats["data"]
            results.append((arrays, after["bytes"] - before["bytes"], after["requests"] - before["requests"]))
    return results


@pytest.mark.parametrize("dim", [0, 1])
async def test_predicted_blocks_are_the_blocks_and_read_once(tmp_path: pathlib.Path, dim: int) -> None:
    truth = matrix_arrays()
    path = tmp_path / "m.pt2"
    write_aligned_pt2(path, truth)
    async with FaultServer() as server:
        server.put("/m.pt2", path.read_bytes())
        ranks = await _ranks(server.url("/m.pt2"), dim)
    share = sum(truth[f"layer{i}.weight"].nbytes for i in range(4)) // 4
    for rank, (arrays, read, _) in enumerate(ranks):
        for name, array in truth.items():
            want = array if name == "norm" else _block(array, rank, 4, dim)
            assert np.array_equal(arrays[name], want), (name, rank)
        if dim == 0:  # the blocks, the headers and the vector: nothing read twice
            assert share <= read <= share + truth["norm"].nbytes + 4 * 4096, (rank, read, share)


@pytest.mark.parametrize("dim", [0, 1])
async def test_a_header_that_refutes_the_prediction_gets_the_right_bytes(
    tmp_path: pathlib.Path, dim: int
) -> None:
    truth = matrix_arrays()
    path = tmp_path / "m.pt2"
    write_aligned_pt2(path, truth, shifted={1, 3})  # layer1 and layer3 start 64 bytes later than predicted
    plain = tmp_path / "plain.pt2"
    write_aligned_pt2(plain, truth)
    async with FaultServer() as server:
        server.put("/m.pt2", path.read_bytes())
        server.put("/plain.pt2", plain.read_bytes())
        ranks = await _ranks(server.url("/m.pt2"), dim)
        predicted = await _ranks(server.url("/plain.pt2"), dim)
    share = sum(truth[f"layer{i}.weight"].nbytes for i in range(4)) // 4
    for rank, (arrays, read, requests) in enumerate(ranks):
        for name, array in truth.items():
            want = array if name == "norm" else _block(array, rank, 4, dim)
            assert np.array_equal(arrays[name], want), (name, rank)
        assert requests >= predicted[rank][2] + 2, (rank, requests)  # the two blocks read again
        if dim == 0:  # at most twice: at the wrong offset (unless refuted first), then at the right one
            assert read <= share + 2 * share // 4 + truth["norm"].nbytes + 4 * 4096, (rank, read)
