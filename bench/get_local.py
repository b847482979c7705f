"""Write one 512 MiB tensor of a local .pt2 to a file: `pt2serve get`'s path against the kernel's floor.

    python3 bench/get_local.py [--cache-dir DIR] [--repeat N] [--strict]

The archive is stream_local.py's (one float32 buffer of 128 Mi elements, stored), page cache warm.
Each round runs, in alternating order (bench/_rounds.py), on a fresh output file each time:

- in-process, the copy alone:
  - "chunks": what `get` does: `tensor.chunks()` (pread into a buffer, CRC-32) written to the file;
  - "copy_file_range": a bare copy_file_range loop over the same bytes, unchecked (what `cp` does):
    the floor of any copy, which never brings the bytes to user space and so cannot check them;
- end to end, each its own process: `pt2serve get ... -o FILE` against the bare copy_file_range loop
  in a fresh interpreter, so the difference includes `import reader` and the archive's open.

CPU seconds per GiB (user + system, this process or the child) are reported per row. Target: the
chunk path >= 0.8x the bare copy_file_range loop (the same bytes, one kernel copy, no check).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import reader  # noqa: E402
from bench import _rounds  # noqa: E402
from bench._archives import TENSOR  # noqa: E402
from bench._host import cpu_times, steal_note  # noqa: E402
from bench.stream_local import ensure_archive  # noqa: E402

FLOOR_MIN = 0.8  # chunk path / bare copy_file_range
PIECE = 8 << 20  # bytes per copy_file_range call
FLOOR_PROCESS = f"""
import os, sys
source, out = os.open(sys.argv[1], os.O_RDONLY), os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT, 0o644)
start, end = int(sys.argv[3]), int(sys.argv[4])
done = 0
while done < end - start:
    done += os.copy_file_range(source, out, min({PIECE}, end - start - done), start + done, done)
"""  # the bare loop in a fresh interpreter that imports nothing else


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


class Rows:
    """Each contender: one run, its output removed after; wall seconds returned, CPU seconds kept."""

    def __init__(self, archive: pathlib.Path, out: pathlib.Path) -> None:
        self.archive = archive
        self.out = out
        self.cpu: dict[str, list[float]] = {}

    def _timed(self, label: str, who: int, job) -> float:
        self.out.unlink(missing_ok=True)
        cpu = _cpu(who)
        started = time.perf_counter()
        job()
        elapsed = time.perf_counter() - started
        self.cpu.setdefault(label, []).append(_cpu(who) - cpu)
        self.out.unlink(missing_ok=True)
        return elapsed

    def chunks(self) -> float:
        return self._timed("chunks", resource.RUSAGE_SELF, lambda: asyncio.run(self._chunks()))

    async def _chunks(self) -> None:
        async with reader.open_archive(self.archive) as ar:
            with open(self.out, "wb") as out:
                async for chunk in ar.tensor(TENSOR).chunks():
                    out.write(chunk)

    def floor(self) -> float:
        return self._timed("copy_file_range", resource.RUSAGE_SELF, self._floor)

    def _floor(self) -> None:
        copy_span(str(self.archive), str(self.out), *self.span)

    def cli(self) -> float:
        command = [sys.executable, "-m", "app", "get", str(self.archive), TENSOR, "-o", str(self.out)]
        return self._timed("pt2serve get -o FILE", resource.RUSAGE_CHILDREN, lambda: _run(command))

    def floor_process(self) -> float:
        span = map(str, self.span)
        command = [sys.executable, "-c", FLOOR_PROCESS, str(self.archive), str(self.out), *span]
        job = lambda: subprocess.run(command, check=True, cwd=ROOT)  # noqa: E731
        return self._timed("copy_file_range process", resource.RUSAGE_CHILDREN, job)


def copy_span(archive: str, output: str, start: int, end: int) -> None:
    """Bytes [start, end) of `archive` into a new file `output`, in the kernel, unchecked."""
    source = os.open(archive, os.O_RDONLY)
    out = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        done = 0
        while done < end - start:
            done += os.copy_file_range(source, out, min(PIECE, end - start - done), start + done, done)
    finally:
        os.close(source)
        os.close(out)


def _run(command: list[str]) -> None:
    subprocess.run([*command, "--no-progress", "--no-resume"], check=True, cwd=ROOT)


async def _span(archive: pathlib.Path) -> tuple[int, int]:
    async with reader.open_archive(archive) as ar:
        return await ar.tensor(TENSOR).archive_span()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cache-dir", type=pathlib.Path, default=pathlib.Path("/tmp/pt2serve-bench"))
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    archive = ensure_archive(args.cache_dir)
    with tempfile.TemporaryDirectory(dir=args.cache_dir) as tmp:
        rows = Rows(archive, pathlib.Path(tmp) / "out.bin")
        rows.span = asyncio.run(_span(archive))
        size = rows.span[1] - rows.span[0]
        archive.read_bytes()  # the page cache warm
        passed = True
        for title, contenders, ours, bases in (
            ("the copy alone, in-process", {"chunks": rows.chunks, "copy_file_range": rows.floor},
             "chunks", [("copy_file_range", FLOOR_MIN)]),
            ("end to end, a process each", {"pt2serve get -o FILE": rows.cli,
                                            "copy_file_range process": rows.floor_process},
             "pt2serve get -o FILE", [("copy_file_range process", None)]),
        ):  # fmt: skip
            since = cpu_times()
            seconds = _rounds.alternate(contenders, args.repeat)
            print(f"\n{title}: {size / 2**20:.0f} MiB, {args.repeat} rounds, {steal_note(since)}")
            for label, values in seconds.items():
                median = statistics.median(values)
                cpu = statistics.median(rows.cpu[label]) / (size / 2**30)
                rate = size / median / 1e9
                print(f"  {label:26s} {median * 1e3:8.1f} ms  {rate:5.2f} GB/s  {cpu:.2f} CPU s/GiB")
            for base, target in bases:
                ratio = statistics.median(seconds[base]) / statistics.median(seconds[ours])
                verdict = "" if target is None else (" PASS" if ratio >= target else " FAIL")
                passed &= target is None or ratio >= target
                goal = "" if target is None else f" (target >= {target}x)"
                print(f"  {ours} vs {base}: {ratio:.2f}x{goal}{verdict}")
                print(f"    {_rounds.compare(seconds, ours, base, target)}")
    return 0 if passed or not args.strict else 1


if __name__ == "__main__":
    sys.exit(main())
