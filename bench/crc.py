"""The CRC-32 rule (reader.zipfmt.crc32) against the standard library's zlib.crc32 on 64 MiB.

    python3 bench/crc.py [--repeat N] [--size MIB] [--strict]

Every entry a reader reads whole is CRC-32 checked, so on a fast host the rule's speed bounds every
stream. Both run alternately on the same random buffer, in this process; the row prints medians in
GB/s (1e9 B/s), CPU seconds per GiB (user + system of this process, from `resource`), and the
ratio of wall times (the target's) and of CPU times. Informational rows: the candidates measured for
the rule (ISA-L's `isal`, `zlib-ng`), each where installed, and inflate of 64 MiB of float32 normals
DEFLATE-compressed, by the rule's library and by zlib. Target: the rule >= 2.5x zlib.crc32.
"""

from __future__ import annotations

import argparse
import pathlib
import resource
import statistics
import sys
import time
import zlib
from collections.abc import Callable

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "bench"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from _host import cpu_times, steal_note  # noqa: E402
from _rounds import compare  # noqa: E402

from reader import zipfmt  # noqa: E402
from reader.zipfmt import decode  # noqa: E402

TARGET = 2.5


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(run: Callable[[], object]) -> tuple[float, float]:
    """(seconds, CPU seconds) of one call."""
    before, started = cpu(), time.perf_counter()
    run()
    return time.perf_counter() - started, cpu() - before


Runs = dict[str, list[tuple[float, float]]]  # label -> (seconds, CPU seconds) of each run


def alternate(contenders: dict[str, Callable[[], object]], repeat: int) -> Runs:
    runs: Runs = {label: [] for label in contenders}
    for turn in range(repeat):
        labels = list(contenders) if turn % 2 == 0 else list(reversed(contenders))
        for label in labels:
            runs[label].append(timed(contenders[label]))
    return runs


def candidates(data: bytes) -> dict[str, Callable[[], object]]:
    found: dict[str, Callable[[], object]] = {}
    try:
        from isal import isal_zlib

        found["isal.isal_zlib.crc32"] = lambda: isal_zlib.crc32(data)
    except ImportError:
        pass
    try:
        from zlib_ng import zlib_ng

        found["zlib_ng.crc32"] = lambda: zlib_ng.crc32(data)
    except ImportError:
        pass
    return found


def inflaters(compressed: bytes, size: int) -> dict[str, Callable[[], object]]:
    def inflate(module) -> Callable[[], object]:
        def run() -> None:
            out = module.decompressobj(-15).decompress(compressed)
            assert len(out) == size

        return run

    return {f"{decode.LIBRARY} inflate": inflate(decode._library), "zlib inflate": inflate(zlib)}


def report(label: str, nbytes: int, runs: list[tuple[float, float]]) -> float:
    seconds = statistics.median(run[0] for run in runs)
    per_gib = statistics.median(run[1] for run in runs) / (nbytes / 2**30)
    print(f"  {label:<24} {nbytes / seconds / 1e9:6.2f} GB/s   cpu {per_gib:.3f} s/GiB", flush=True)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="runs per contender (default 9)")
    parser.add_argument("--size", type=int, default=64, help="MiB of random bytes (default 64)")
    parser.add_argument("--strict", action="store_true", help="exit 1 if the target is missed")
    args = parser.parse_args(argv)
    nbytes = args.size << 20
    data = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    assert zipfmt.crc32(data) == zlib.crc32(data)
    print(f"CRC-32 of {args.size} MiB, medians of {args.repeat} alternating runs; the rule: {decode.LIBRARY}")
    since = cpu_times()
    runs = alternate({"rule": lambda: zipfmt.crc32(data), "zlib": lambda: zlib.crc32(data)}, args.repeat)
    ours = report(f"reader.zipfmt.crc32 ({decode.LIBRARY})", nbytes, runs["rule"])
    base = report("zlib.crc32", nbytes, runs["zlib"])
    ratio = base / ours
    ok = ratio >= TARGET
    cpu_rule, cpu_zlib = (statistics.median(run[1] for run in runs[label]) for label in ("rule", "zlib"))
    print(f"  ratio {ratio:.2f}x   {'PASS' if ok else 'FAIL'} (target >= {TARGET}x); by CPU time "
          f"{cpu_zlib / cpu_rule:.2f}x (steadier than wall time on a loaded host)")  # fmt: skip
    seconds = {label: [run[0] for run in values] for label, values in runs.items()}
    print(f"  {compare(seconds, 'rule', 'zlib', TARGET)}")
    print("informational: the candidates")
    for label, values in alternate(candidates(data), args.repeat).items():
        report(label, nbytes, values)
    # weights-like bytes (float32 normals: DEFLATE saves ~7%), as a re-zipped archive holds them
    floats = np.random.default_rng(1).standard_normal(nbytes // 4, dtype=np.float32).tobytes()
    packer = zlib.compressobj(6, zlib.DEFLATED, -15)
    compressed = packer.compress(floats) + packer.flush()
    share = len(compressed) / nbytes
    print(f"informational: inflate of {args.size} MiB of float32 normals ({share:.0%} deflated)")
    for label, values in alternate(inflaters(compressed, nbytes), max(3, args.repeat // 3)).items():
        report(label, nbytes, values)
    print(f"  {steal_note(since)}")
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
