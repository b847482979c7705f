"""Shards for tensor parallelism over the network: a rank reads about its share of the matched weights
(S3, counted by the source), column blocks over HTTP put together make the whole, and a corrupt whole
tensor beside the blocks fails the load. The block rules on local archives are in test_shards_rules.py."""

from __future__ import annotations

import numpy as np
import pytest

import reader
from reader.sources import HttpOptions, S3Settings
from testing.faultserver import FaultServer
from testing.shard_blocks import block, matrices

pytestmark = pytest.mark.emulator


async def _rank_reads(location: str, rank: int, dims: dict, **options) -> tuple[dict, int]:
    async with reader.open_archive(location, **options) as archive:
        before = archive.stats.get("data", {}).get("bytes", 0)
        arrays = await archive.load(shard=reader.Shard(rank, 4, dims))
        return arrays, archive.stats["data"]["bytes"] - before


async def test_over_s3_a_rank_reads_its_share_of_the_matched_weights(tmp_path, seaweed_s3) -> None:
    path, truth = matrices(tmp_path)
    key = "shards/matrices.pt2"
    seaweed_s3.upload(seaweed_s3.private_bucket, key, path)
    settings = S3Settings(region=seaweed_s3.region, endpoint=seaweed_s3.endpoint,
                          access_key=seaweed_s3.access_key, secret_key=seaweed_s3.secret_key)  # fmt: skip
    location = f"s3://{seaweed_s3.private_bucket}/{key}"
    weights = sum(truth[f"layer{i}.weight"].nbytes for i in range(4))
    for rank in range(4):
        arrays, read = await _rank_reads(location, rank, {"layer*": 0}, s3_settings=settings)
        share = weights // 4  # the blocks (the unmatched vector may come with the open's tail read)
        assert share <= read <= share + truth["norm"].nbytes + 4 * 4096, (rank, read, share)  # + headers
        for name, array in truth.items():
            want = array if name == "norm" else block(array, rank, 4, 0)
            assert np.array_equal(arrays[name], want), (name, rank)


async def test_over_http_column_blocks_put_together_make_the_whole(tmp_path) -> None:
    path, truth = matrices(tmp_path)
    options = HttpOptions(parallel_parts=4, part_size=1 << 18, parallel_above=1 << 18, fast_connection=None)
    async with FaultServer() as server:
        server.put("/m.pt2", path.read_bytes())
        ranks = [
            (await _rank_reads(server.url("/m.pt2"), rank, {"layer*": 1}, http_options=options))[0]
            for rank in range(4)
        ]
    for name, array in truth.items():
        if name == "norm":
            assert all(np.array_equal(arrays[name], array) for arrays in ranks)
        else:
            assert np.array_equal(np.concatenate([arrays[name] for arrays in ranks], axis=1), array)
            # rows read joined across their small gaps, then gathered: a rank keeps only its block
            assert all(arrays[name].flags.c_contiguous for arrays in ranks)


async def test_a_corrupt_whole_tensor_beside_the_blocks_fails_the_load(tmp_path) -> None:
    """Remotely the small whole tensors come with the cut entries' local headers: still CRC-checked."""
    import zipfile

    path, _ = matrices(tmp_path)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("synthetic/data/weights/weight_4")  # "norm", 4 KiB
    data[info.header_offset + 1000] ^= 0xFF  # inside its data
    async with FaultServer() as server:
        server.put("/m.pt2", bytes(data))
        async with reader.open_archive(server.url("/m.pt2")) as archive:
            shard = reader.Shard(1, 4, {"layer*": 0})
            with pytest.raises(reader.IntegrityError, match="weight_4"):
                await archive.load(shard=shard)
            with pytest.raises(reader.IntegrityError, match="weight_4"):
                async for name, _ in archive.iter_load(shard=shard):
                    assert name != "norm"
