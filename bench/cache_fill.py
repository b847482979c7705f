"""What a filling load costs in one tree of the code against another (a commit before a change to
how the cache writes): the same S3 object, the same fill, alternating, in subprocesses.

    python3 bench/cache_fill.py --baseline /tmp/cache-base [--config gpt2] [--repeat N]

`--baseline` is a checkout of the other commit (`git worktree add /tmp/cache-base <commit>`). Each
round runs one filling `reader.load(..., cache_dir=<empty folder>)` + every byte touched (the
`filling` row of bench/cache.py) under this tree and under the baseline, in a fresh interpreter
whose PYTHONPATH is that tree; only the load and touch are timed (in the child). Medians, same run.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "bench"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from _host import cpu_times, steal_note  # noqa: E402
from load_model import VOLUME_BYTES  # noqa: E402
from make_gpt2 import CONFIGS, DEFAULT_CACHE, ensure_gpt2  # noqa: E402

CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1] + "/bench")
from load_model import touch
import reader
from reader.sources import S3Settings
location, settings, cache_dir = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
started = time.perf_counter()
touch(reader.load(location, s3_settings=S3Settings(**settings), cache_dir=cache_dir).values())
print(time.perf_counter() - started)
"""


def fill_once(tree: pathlib.Path, location: str, settings: dict, cache_dir: pathlib.Path) -> float:
    shutil.rmtree(cache_dir, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-c", CHILD, str(tree), location, json.dumps(settings), str(cache_dir)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=pathlib.Path, required=True, help="a checkout of the other commit")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="gpt2")
    parser.add_argument("--cache-dir", type=pathlib.Path, default=DEFAULT_CACHE, help="generated archives")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    archive, _ = ensure_gpt2(args.config, args.cache_dir)
    nbytes = archive.stat().st_size
    from testing.seaweed import SeaweedS3

    trees = {"this": ROOT, "baseline": args.baseline.resolve()}
    runs: dict[str, list[float]] = {name: [] for name in trees}
    with (
        SeaweedS3(volumes=max(64, 2 * nbytes // VOLUME_BYTES + 16)) as s3,
        tempfile.TemporaryDirectory() as folder,
    ):
        key = f"fill/{archive.name}"
        s3.upload(s3.private_bucket, key, archive)
        location = f"s3://{s3.private_bucket}/{key}"
        settings = {"region": s3.region, "endpoint": s3.endpoint, "access_key": s3.access_key,
                    "secret_key": s3.secret_key}  # fmt: skip
        print(f"archive: {archive} ({nbytes / 1e6:.0f} MB); filling {folder}", flush=True)
        since = cpu_times()
        for round_ in range(args.repeat):
            order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
            for name in order:
                runs[name].append(fill_once(trees[name], location, settings, pathlib.Path(folder) / "cache"))
            times = ", ".join(f"{name} {runs[name][-1] * 1e3:.0f} ms" for name in trees)
            print(f"  round {round_}: {times}", flush=True)
        print(f"  {steal_note(since)}")
    this, baseline = (statistics.median(runs[name]) for name in ("this", "baseline"))
    rates = f"{nbytes / this / 1e9:.2f} vs {nbytes / baseline / 1e9:.2f} GB/s"
    ratios = sorted(a / b for a, b in zip(runs["this"], runs["baseline"], strict=True))
    print(f"\nfilling load + touch: this tree {this * 1e3:.0f} ms, baseline {baseline * 1e3:.0f} ms "
          f"({this / baseline:.2f}x; {rates}); rounds {ratios[0]:.2f} - {ratios[-1]:.2f}x, "
          f"their median {statistics.median(ratios):.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
