"""Streaming within a memory budget (issue 54 items 1 and 2): peak RSS and speed of the ways a loader
takes a model larger than it wants to hold, from nginx on loopback.

    python3 bench/stream_memory.py [--repeat N] [--max-buffered BYTES] [--contenders load,iter,safe_open]
                                   [--before CHECKOUT] [--bundles]

The model is 48 x Linear(4096, 4096) float32 (3 GiB; torch.save's `pytorch_model.bin`), made once
under /tmp/pt2serve-bench. Each contender runs in a fresh process (open included; its peak RSS is
VmHWM, imports included), the contenders alternate round by round (bench/_rounds.py), and the rows
compare medians of the same run:
- load: `reader.torch.load(url)` (returns the model: peak <= 1.05x model + 300 MiB);
- iter: `reader.torch.iter_load` with each tensor dropped as it lands (peak <= 1.3 GiB; speed >= 0.9x
  load's);
- safe_open: `reader.safe_open(url)` and `get_tensor` of every key in `keys()` order, each dropped
  (peak <= 1.3 GiB; speed >= 0.8x iter's).
`--before DIR` runs each contender on the code of another checkout too (its own defaults), in the same
rounds: the same-run baseline. Then (`--bundles`), once: the service (`pt2serve serve m=url`, its own
process) answering /archives/m/safetensors and /archives/m/ptd to curl, and an exact `reader.compare`
of the model with itself (a fresh process): their peak RSS against the model's size (informational:
they stream).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "bench"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from _rounds import alternate  # noqa: E402

from testing.servers import NginxProcess  # noqa: E402

CACHE = pathlib.Path("/tmp/pt2serve-bench/stream-memory")
LAYERS, WIDTH = 48, 4096
GIB, MIB = 1 << 30, 1 << 20

CHILD = r"""
import asyncio, json, sys, time
import torch
import reader, reader.torch

kind, url, budget = sys.argv[1], sys.argv[2], sys.argv[3]
keywords = {"max_buffered": int(budget)} if budget else {}  # none: the library's default (or older code)

def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

async def iterate():
    count = 0
    async with reader.open_archive(url) as archive:
        async for name, tensor in reader.torch.iter_load(archive, **keywords):
            count += tensor.numel() > 0
            del tensor
    return count

def run():
    if kind == "load":
        return len(reader.torch.load(url))
    if kind == "iter":
        return asyncio.run(iterate())
    count = 0
    with reader.safe_open(url, framework="pt", **keywords) as handle:
        for name in handle.keys():  # noqa: SIM118 - safetensors handles have keys(), no __iter__
            tensor = handle.get_tensor(name)
            count += tensor.numel() > 0
            del tensor
    return count

start = time.perf_counter()
count = run()
print(json.dumps({"seconds": time.perf_counter() - start, "peak": peak(), "tensors": count}))
"""


def make_model() -> pathlib.Path:
    path = CACHE / "pytorch_model.bin"
    if path.exists():
        return path
    import torch

    CACHE.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    state = {}
    for layer in range(LAYERS):
        state[f"layers.{layer}.weight"] = torch.randn(WIDTH, WIDTH, generator=generator)
        state[f"layers.{layer}.bias"] = torch.randn(WIDTH, generator=generator)
    torch.save(state, str(path) + ".part")
    os.replace(str(path) + ".part", path)
    return path


def child(
    kind: str, url: str, budget: int | None, peaks: dict[str, list[int]], code: pathlib.Path = ROOT
) -> float:
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, kind, url, "" if budget is None else str(budget)],
        capture_output=True, text=True, env=env, timeout=900, cwd=code,  # (-c puts the cwd first on sys.path)
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"{kind}: {done.stderr.strip()[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    peaks.setdefault(kind if code == ROOT else f"{kind} (before)", []).append(result["peak"])
    return result["seconds"]


COMPARE = r"""
import asyncio, json, sys
import reader

async def main():
    async with reader.open_archive(sys.argv[1]) as a, reader.open_archive(sys.argv[1]) as b:
        comparison = await reader.compare(a, b, exact=True)
    return len(comparison.tensors)

count = asyncio.run(main())
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        print(json.dumps({"peak": int(line.split()[1]) * 1024, "tensors": count}))
"""


def status_bytes(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise LookupError(field)


def bundles(url: str, model: int) -> None:
    """Peak RSS of the service answering the bundles, and of an exact comparison."""
    from testing.servers import free_port, stop_process, wait_listening

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "app", "serve", f"m={url}", "--port", str(port)]
    server = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_listening(port, server, "pt2serve serve", 120)
        for route in ("safetensors", "ptd"):
            before = status_bytes(server.pid, "VmRSS:")
            started = time.perf_counter()
            subprocess.run(
                ["curl", "-sf", "-o", "/dev/null", f"http://127.0.0.1:{port}/archives/m/{route}"], check=True
            )
            seconds = time.perf_counter() - started
            peak = status_bytes(server.pid, "VmHWM:")
            print(f"service /{route}: {seconds:6.2f} s, server peak RSS {peak / GIB:5.2f} GiB "
                  f"({peak / model:4.2f}x model; {before / GIB:.2f} GiB before)")  # fmt: skip
    finally:
        stop_process(server)
    done = subprocess.run(
        [sys.executable, "-c", COMPARE, url], capture_output=True, text=True, env=env, check=True
    )
    peak = json.loads(done.stdout.strip().splitlines()[-1])["peak"]
    print(
        f"exact compare of the model with itself: peak RSS {peak / GIB:5.2f} GiB ({peak / model:4.2f}x model)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-buffered", type=int, default=None, help="bytes (default: the library's)")
    parser.add_argument("--contenders", default="load,iter,safe_open")
    parser.add_argument(
        "--before", type=pathlib.Path, help="a checkout of the code before: its contenders too"
    )
    parser.add_argument("--bundles", action="store_true", help="also the service's bundles and a comparison")
    args = parser.parse_args(argv)
    path = make_model()
    model = path.stat().st_size
    kinds = [kind for kind in args.contenders.split(",") if kind]
    print(f"model {model / GIB:.2f} GiB, load average {os.getloadavg()}", flush=True)
    peaks: dict[str, list[int]] = {}
    with NginxProcess(path.parent) as nginx:
        url = nginx.url(path.name)
        contenders = {kind: (lambda kind=kind: child(kind, url, args.max_buffered, peaks)) for kind in kinds}
        if args.before:
            for kind in kinds:
                contenders[f"{kind} (before)"] = lambda kind=kind: child(kind, url, None, peaks, args.before)
        seconds = alternate(contenders, args.repeat) if kinds else {}
        if args.bundles:
            bundles(url, model)
    print(f"load average after {os.getloadavg()}")
    medians = {kind: statistics.median(values) for kind, values in seconds.items()}
    for kind in seconds:
        peak = statistics.median(peaks[kind])
        rate = model / medians[kind] / GIB
        print(f"{kind:19s} {medians[kind]:6.2f} s  {rate:5.2f} GiB/s  peak RSS {peak / GIB:5.2f} GiB "
              f"({peak / model:4.2f}x model)  rounds {[round(s, 2) for s in seconds[kind]]}")  # fmt: skip
    verdicts = []
    if "load" in medians:
        bound = 1.05 * model + 300 * MIB
        verdicts.append(("load peak <= 1.05x model + 300 MiB", statistics.median(peaks["load"]) <= bound))
    if "iter" in medians:
        verdicts.append(("iter peak <= 1.3 GiB", statistics.median(peaks["iter"]) <= 1.3 * GIB))
        if "load" in medians:
            ratio = medians["load"] / medians["iter"]
            verdicts.append((f"iter speed {ratio:.2f}x load's >= 0.9x", ratio >= 0.9))
    if "safe_open" in medians:
        verdicts.append(("safe_open peak <= 1.3 GiB", statistics.median(peaks["safe_open"]) <= 1.3 * GIB))
        if "iter" in medians:
            ratio = medians["iter"] / medians["safe_open"]
            verdicts.append((f"safe_open speed {ratio:.2f}x iter's >= 0.8x", ratio >= 0.8))
    for what, ok in verdicts:
        print(f"{'PASS' if ok else 'FAIL'}  {what}")
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
