"""Bounded load / soak of the service on loopback.

Starts `python3 -m app serve --port P id=PATH ...` as a child process on a local archive
(`--cache-dir`/gpt2_small.pt2 if present, else tests/fixtures/archives/many.pt2) and, with `--s3`, an
S3-backed copy of it in SeaweedFS (testing.seaweed.SeaweedS3). N concurrent httpx clients (default 32) run
for a fixed time (default 20 s), mixing layout, full-data, Range and HEAD requests over every archive;
every body is checked (length, and bytes against a reference read once up front).

Reports requests/s, p50/p99 latency per kind, errors (target 0), and the server's RSS and open file
descriptors (/proc/PID/fd) before and after (target: growth within a small bound). Every process it starts
is stopped by its PID at exit. Exits 1 with --strict when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import defaultdict

import httpx

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import reader  # noqa: E402

FALLBACK = ROOT / "tests" / "fixtures" / "archives" / "many.pt2"
FD_BOUND = 16  # open fds may grow by at most this much over the run
RSS_BOUND_MB = 64.0  # and RSS by at most this much (after warm-up)
BIG_BODY = 4 << 20  # full-data requests only for tensors up to this size; bigger ones get Ranges


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mb(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Target:
    """One archive as the service names it, with reference bytes for the tensors we fetch."""

    def __init__(self, archive_id: str, tensors: list[reader.TensorInfo], data: dict[str, bytes]) -> None:
        self.id = archive_id
        self.tensors = [t for t in tensors if t.readable and (t.nbytes or 0) > 0]
        self.data = data


async def reference(archive_id: str, path: pathlib.Path, sample: int, rng: random.Random) -> Target:
    async with reader.open_archive(path) as ar:
        tensors = [t for t in ar.tensors() if t.readable and (t.nbytes or 0) > 0]
        small = [t for t in tensors if (t.nbytes or 0) <= BIG_BODY]
        chosen = rng.sample(small, min(sample, len(small)))
        data = {f"{t.model}/{t.name}": await ar.read(t.name, model=t.model) for t in chosen}
    target = Target(archive_id, tensors, data)
    return target


async def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=url) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}")
            try:
                health = (await client.get("/healthz")).json()
                if all(status in ("open", "error") for status in health["archives"].values()):
                    if any(status == "error" for status in health["archives"].values()):
                        raise RuntimeError(f"an archive failed to open: {health}")
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise TimeoutError("server not ready")


async def worker(
    client: httpx.AsyncClient, targets: list[Target], deadline: float, rng: random.Random, stats: dict
) -> None:
    while time.monotonic() < deadline:
        target = rng.choice(targets)
        kind = rng.choices(["layout", "data", "range", "head"], weights=[3, 3, 3, 1])[0]
        if kind == "data" and target.data:
            key = rng.choice(list(target.data))
            info = None
        else:
            info = rng.choice(target.tensors)
            key = f"{info.model}/{info.name}"
            if kind == "data":
                kind = "range"
        model, _, name = key.partition("/")
        base = f"/archives/{target.id}/tensors/{name}"
        started = time.perf_counter()
        try:
            if kind == "layout":
                response = await client.get(f"{base}/layout", params={"model": model})
                ok = response.status_code == 200 and response.json()["name"] == name
            elif kind == "head":
                response = await client.head(f"{base}/data", params={"model": model})
                ok = response.status_code == 200 and response.headers["content-length"] == str(info.nbytes)
            elif kind == "data":
                response = await client.get(f"{base}/data", params={"model": model})
                ok = response.status_code == 200 and response.content == target.data[key]
            else:
                size = info.nbytes
                start = rng.randrange(size)
                end = min(size, start + rng.randint(1, 256 << 10))
                response = await client.get(
                    f"{base}/data", params={"model": model}, headers={"Range": f"bytes={start}-{end - 1}"}
                )
                ok = response.status_code == 206 and len(response.content) == end - start
                if ok and key in target.data:
                    ok = response.content == target.data[key][start:end]
        except httpx.HTTPError as exc:
            ok, response = False, None
            stats["exceptions"][type(exc).__name__] += 1
        elapsed = time.perf_counter() - started
        stats["latency"][kind].append(elapsed)
        stats["count"][kind] += 1
        if not ok:
            stats["errors"][f"{kind} {getattr(response, 'status_code', 'exc')}"] += 1


async def run_load(url: str, targets: list[Target], clients: int, seconds: float, seed: int) -> dict:
    stats: dict = {
        "latency": defaultdict(list),
        "count": defaultdict(int),
        "errors": defaultdict(int),
        "exceptions": defaultdict(int),
    }
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        deadline = time.monotonic() + seconds
        started = time.monotonic()
        await asyncio.gather(
            *(worker(client, targets, deadline, random.Random(seed + i), stats) for i in range(clients))
        )
        stats["wall"] = time.monotonic() - started
    return stats


def start_server(port: int, specs: list[str], env: dict[str, str]) -> subprocess.Popen:
    command = [sys.executable, "-m", "app", "serve", "--port", str(port), "--log-level", "warning", *specs]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


async def main_async(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    local = pathlib.Path(args.cache_dir) / "gpt2_small.pt2"
    path = local if local.exists() else FALLBACK
    env = {**os.environ, "PT2SERVE_REVALIDATE_SECONDS": "0"}
    specs = [f"local={path}"]
    seaweed = None
    proc = None
    try:
        targets = [await reference("local", path, args.sample, rng)]
        if args.s3:
            from testing.seaweed import SeaweedS3

            seaweed = SeaweedS3().start()
            seaweed.create_buckets()
            seaweed.upload(seaweed.private_bucket, "load/archive.pt2", path)
            env.update(
                PT2SERVE_S3_ENDPOINT=seaweed.endpoint,
                AWS_ACCESS_KEY_ID=seaweed.access_key,
                AWS_SECRET_ACCESS_KEY=seaweed.secret_key,
                AWS_REGION=seaweed.region,
            )
            specs.append(f"s3=s3://{seaweed.private_bucket}/load/archive.pt2")
            targets.append(Target("s3", targets[0].tensors, targets[0].data))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = start_server(port, specs, env)
        await wait_ready(url, proc)
        print(f"archive: {path} ({path.stat().st_size / 1e6:.1f} MB, {len(targets[0].tensors)} tensors); "
              f"archives served: {', '.join(t.id for t in targets)}; server pid {proc.pid}")  # fmt: skip
        await run_load(url, targets, args.clients, args.warmup, args.seed + 1000)  # warm-up
        before = (rss_mb(proc.pid), fd_count(proc.pid))
        stats = await run_load(url, targets, args.clients, args.seconds, args.seed)
        await asyncio.sleep(0.5)
        after = (rss_mb(proc.pid), fd_count(proc.pid))
    finally:
        if proc is not None:
            stop(proc)
        if seaweed is not None:
            seaweed.stop()

    total = sum(stats["count"].values())
    errors = sum(stats["errors"].values())
    everything = [x for values in stats["latency"].values() for x in values]
    rate = total / stats["wall"]
    print(
        f"\n{args.clients} clients {stats['wall']:.1f} s: {total} requests, {rate:.0f} req/s, errors {errors}"
    )
    print("\n| kind | requests | p50 ms | p99 ms |")
    print("| --- | --- | --- | --- |")
    for kind in ("layout", "data", "range", "head"):
        values = stats["latency"].get(kind, [])
        print(f"| {kind} | {len(values)} | {percentile(values, 0.5) * 1e3:.1f} | "
              f"{percentile(values, 0.99) * 1e3:.1f} |")  # fmt: skip
    p50, p99 = percentile(everything, 0.5) * 1e3, percentile(everything, 0.99) * 1e3
    print(f"| all | {total} | {p50:.1f} | {p99:.1f} |")
    if stats["errors"] or stats["exceptions"]:
        print(f"errors: {dict(stats['errors'])}; exceptions: {dict(stats['exceptions'])}")
    mean = statistics.fmean(everything) if everything else 0
    print(f"mean latency {mean * 1e3:.1f} ms")
    print(f"\nserver RSS {before[0]:.1f} → {after[0]:.1f} MB; open fds {before[1]} → {after[1]}")
    checks = [
        ("errors == 0", errors == 0 and not stats["exceptions"], f"{errors}"),
        (f"fd growth ≤ {FD_BOUND}", after[1] - before[1] <= FD_BOUND, f"{after[1] - before[1]:+d}"),
        (f"RSS growth ≤ {RSS_BOUND_MB:.0f} MB", after[0] - before[0] <= RSS_BOUND_MB,
         f"{after[0] - before[0]:+.1f} MB"),
    ]  # fmt: skip
    failed = False
    for label, passed, value in checks:
        print(f"{'PASS' if passed else 'FAIL'}: {label} ({value})")
        failed |= not passed
    return 1 if failed and args.strict else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", default="/tmp/pt2serve-bench")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--sample", type=int, default=24, help="tensors whose full bytes are checked")
    parser.add_argument("--s3", action="store_true", help="also serve an S3 copy from SeaweedFS")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--strict", action="store_true")
    args = parser.parse_args()
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
