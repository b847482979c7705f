"""The HTTP service end to end: pt2serve vs nginx, memory while streaming, and 64 concurrent clients.

    python3 bench/serve.py [--cache-dir DIR] [--repeat N] [--chunk-sizes 4M] [--duration 10]
                           [--clients 64] [--profile] [--throughput-only] [--strict]

Archives (generated once with torch.export, cached in --cache-dir): one float32
buffer `big` of 1 GiB, and one of 2 GiB. pt2serve runs as `python3 -m app serve`
(uvicorn, uvloop, httptools) in a child process; nginx runs as our own single
process (`sendfile on`) serving the cache directory. Both listen on 127.0.0.1.

1. Throughput: `curl -s -o /dev/null` of `/archives/big1g/tensors/big/data`
   against `curl -s -o /dev/null -r START-END` of the same bytes from nginx
   (START = the entry's data offset, from its zip local header, + the storage
   offset from the layout JSON). pt2serve sends it with sendfile(2) once its
   background CRC pass has verified the entry (waited for, and checked on
   /metrics); a second server with PT2SERVE_ZERO_COPY=0 is the streamed path.
   Page cache warm, the three alternate, medians of --repeat in GB/s (1e9 B/s)
   from curl's time_total, and each server's CPU seconds per GiB (user + system,
   /proc/<pid>/stat). Target: pt2serve / nginx >= 0.8 at the default chunk size.
   Then the same with each --chunk-sizes value (the server restarted with
   PT2SERVE_CHUNK_SIZE). --throughput-only stops after this part.
2. Memory: VmRSS of the server sampled every 20 ms while curl downloads the
   2 GiB tensor (baseline = before the request). Target: growth <= 64 MiB.
3. Concurrency: --clients httpx clients for --duration seconds, each looping over
   random tensors of a many-tensor archive (the cached GPT-2-small archive if
   present, else tests/fixtures/archives/many.pt2), half /data (streamed,
   length checked against Content-Length) and half /layout. Reports requests/s,
   MB/s, layout p50/p99 and errors. Target: 0 errors.

--profile samples the server with py-spy (pip install py-spy) during extra
1 GiB downloads and prints the top frames by own time.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import pathlib
import random
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import zipfile
from collections.abc import Sequence

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._archives import TENSOR, ensure_single_tensor_archive  # noqa: E402
from bench.stream_local import human, parse_size  # noqa: E402
from testing.servers import HOST, free_port, stop_process, wait_listening  # noqa: E402
from testing.servers import NginxProcess as Nginx  # noqa: E402

ARCHIVES = {"big1g": ("serve_1gib.pt2", 256 * 1024 * 1024), "big2g": ("serve_2gib.pt2", 512 * 1024 * 1024)}
MANY_FIXTURE = ROOT / "tests" / "fixtures" / "archives" / "many.pt2"
RATIO_MIN = 0.8
RSS_GROWTH_MAX = 64 << 20
DEFAULT_CHUNK_SIZES = "4M"

# zipfile's local file header: signature, version, flags, method, time, date, crc, sizes, name/extra lengths
LOCAL_HEADER = struct.Struct("<4sHHHHHLLLHH")


# --------------------------------------------------------------------------- archives


def data_offset(path: pathlib.Path, entry: str) -> int:
    """File offset of the entry's first data byte, from its local header (not the central directory)."""
    with zipfile.ZipFile(path) as archive:
        header_offset = archive.getinfo(entry).header_offset
    with open(path, "rb") as handle:
        handle.seek(header_offset)
        fields = LOCAL_HEADER.unpack(handle.read(LOCAL_HEADER.size))
    if fields[0] != b"PK\x03\x04":
        raise ValueError(f"no local header for {entry!r} at {header_offset}")
    name_length, extra_length = fields[-2:]
    return header_offset + LOCAL_HEADER.size + name_length + extra_length


def warm(path: pathlib.Path) -> None:
    buffer = bytearray(1 << 20)
    fd = os.open(path, os.O_RDONLY)
    try:
        position = 0
        while read := os.preadv(fd, [buffer], position):
            position += read
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- pt2serve


class Pt2serve:
    """`python3 -m app serve --port P id=PATH ...` as a child process, stopped by its PID."""

    def __init__(
        self,
        archives: dict[str, pathlib.Path],
        chunk_size: int | None = None,
        prefix: Sequence[str] = (),
        zero_copy: bool = True,
    ) -> None:
        self.archives = archives
        self.chunk_size = chunk_size
        self.zero_copy = zero_copy  # False: PT2SERVE_ZERO_COPY=0, every body through writes
        self.prefix = list(prefix)  # a command the server runs under (bench/instructions.py: valgrind)
        self.process: subprocess.Popen | None = None
        self.port = 0

    def __enter__(self) -> Pt2serve:
        self.port = free_port()
        env = dict(os.environ)
        env.pop("PT2SERVE_CHUNK_SIZE", None)
        if self.chunk_size:
            env["PT2SERVE_CHUNK_SIZE"] = str(self.chunk_size)
        env["PT2SERVE_ZERO_COPY"] = "1" if self.zero_copy else "0"
        specs = [f"{archive_id}={path}" for archive_id, path in self.archives.items()]
        command = [*self.prefix, sys.executable, "-m", "app", "serve", "--port", str(self.port)]
        command += ["--log-level", "warning", *specs]
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
        try:
            wait_listening(self.port, self.process, "pt2serve", 300.0 if self.prefix else 60.0)
            deadline = time.monotonic() + 60.0
            while True:
                health = json.loads(fetch(self.url("/healthz")))
                if all(status == "open" for status in health["archives"].values()):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"archives did not open: {health}")
                time.sleep(0.1)
        except BaseException:
            self.__exit__()
            raise
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def url(self, path: str) -> str:
        return f"http://{HOST}:{self.port}{path}"

    def data_url(self, archive_id: str, name: str) -> str:
        return self.url(f"/archives/{archive_id}/tensors/{name}/data")

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None:
            stop_process(self.process)


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read()


# --------------------------------------------------------------------------- curl


def curl(url: str, byte_range: tuple[int, int] | None = None) -> tuple[float, int, int]:
    """(time_total seconds, bytes received, HTTP status) of one curl download to /dev/null."""
    command = ["curl", "-s", "-o", "/dev/null", "-w", "%{time_total} %{size_download} %{http_code}"]
    if byte_range is not None:
        command += ["-r", f"{byte_range[0]}-{byte_range[1]}"]
    done = subprocess.run([*command, url], capture_output=True, text=True, check=True)
    seconds, size, status = done.stdout.split()
    return float(seconds), int(size), int(status)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


def sendfile_bytes(server: Pt2serve) -> float:
    """What the server sent with sendfile(2) so far (its /metrics)."""
    for line in fetch(server.url("/metrics")).decode().splitlines():
        if line.startswith("pt2serve_sendfile_bytes_total "):
            return float(line.split()[1])
    return 0.0


def wait_zero_copy(server: Pt2serve, timeout: float = 300.0) -> float:
    """Download the tensor until the server sends it with sendfile (its background CRC pass over the
    archive done); returns the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        before = sendfile_bytes(server)
        curl(server.data_url("big1g", TENSOR))
        if sendfile_bytes(server) > before:
            return time.monotonic() - started
        time.sleep(1.0)
    raise RuntimeError("the server never sent the tensor with sendfile")


def compare(
    server: Pt2serve,
    nginx: Nginx,
    relative: str,
    span: tuple[int, int],
    repeat: int,
    streamed: Pt2serve | None = None,
) -> dict:
    """Alternating curl runs; medians in seconds for pt2serve (and its streamed path) and nginx."""
    nbytes = span[1] - span[0]
    assert server.process is not None and nginx.process is not None
    contenders = {
        "pt2serve": (server.data_url("big1g", TENSOR), None, 200, server.process.pid),
        "nginx": (nginx.url(relative), (span[0], span[1] - 1), 206, nginx.process.pid),
    }
    if streamed is not None:
        contenders["streamed"] = (streamed.data_url("big1g", TENSOR), None, 200, streamed.pid)
    for url, byte_range, _, _ in contenders.values():  # warm-up, not counted
        curl(url, byte_range)
    times: dict[str, list[float]] = {label: [] for label in contenders}
    client_cpu: dict[str, list[float]] = {label: [] for label in contenders}
    server_cpu: dict[str, list[float]] = {label: [] for label in contenders}
    for _ in range(repeat):
        for label, (url, byte_range, expected, pid) in contenders.items():
            before = children_cpu(), cpu_seconds(pid)
            seconds, size, status = curl(url, byte_range)
            client_cpu[label].append(children_cpu() - before[0])
            server_cpu[label].append(cpu_seconds(pid) - before[1])
            if status != expected or size != nbytes:
                raise AssertionError(f"{label}: HTTP {status}, {size} bytes (expected {expected}, {nbytes})")
            times[label].append(seconds)
    return {
        **{label: statistics.median(values) for label, values in times.items()},
        "all": times,
        "client_cpu": {label: statistics.median(values) for label, values in client_cpu.items()},
        "server_cpu": {label: statistics.median(values) for label, values in server_cpu.items()},
    }


# --------------------------------------------------------------------------- memory


def read_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process in bytes."""
    values = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    return values


def memory_while_streaming(server: Pt2serve, nbytes: int) -> dict[str, int]:
    pid = server.pid
    baseline = []
    for _ in range(10):
        baseline.append(read_status(pid)["VmRSS"])
        time.sleep(0.02)
    with contextlib.suppress(OSError):  # reset VmHWM to the current RSS (Linux >= 4.0)
        pathlib.Path(f"/proc/{pid}/clear_refs").write_text("5")
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(read_status(pid)["VmRSS"])
            stop.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        seconds, size, status = curl(server.data_url("big2g", TENSOR))
    finally:
        stop.set()
        sampler.join()
    if status != 200 or size != nbytes:
        raise AssertionError(f"2 GiB download: HTTP {status}, {size} bytes (expected {nbytes})")
    return {
        "baseline": max(baseline),
        "peak": max(samples),
        "hwm": read_status(pid)["VmHWM"],
        "samples": len(samples),
        "seconds": seconds,
    }


# --------------------------------------------------------------------------- concurrency


async def load(server: Pt2serve, archive_id: str, clients: int, duration: float) -> dict:
    import httpx

    listing = json.loads(fetch(server.url(f"/archives/{archive_id}/tensors")))
    buckets_before = layout_buckets(server)
    names = [t["name"] for t in listing["tensors"] if t.get("readable", True) and not t.get("unsupported")]
    rng = random.Random(1234)
    counts: collections.Counter[str] = collections.Counter()
    layout_latency: list[float] = []
    data_latency: list[float] = []
    errors: list[str] = []
    body_bytes = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    timeout = httpx.Timeout(60.0)

    async with httpx.AsyncClient(base_url=server.url(""), limits=limits, timeout=timeout) as client:
        deadline = time.perf_counter() + duration

        async def worker() -> None:
            nonlocal body_bytes
            while time.perf_counter() < deadline:
                name = rng.choice(names)
                kind = rng.choice(("data", "layout"))
                path = f"/archives/{archive_id}/tensors/{name}/{kind}"
                started = time.perf_counter()
                try:
                    async with client.stream("GET", path) as response:
                        received = 0
                        kept = []
                        async for chunk in response.aiter_raw():
                            received += len(chunk)
                            if kind == "layout":
                                kept.append(chunk)
                        if kind == "layout" and response.status_code == 200:
                            json.loads(b"".join(kept))
                    elapsed = time.perf_counter() - started
                    expected = int(response.headers.get("content-length", -1))
                    if response.status_code != 200:
                        errors.append(f"{path}: HTTP {response.status_code}")
                    elif received != expected:
                        errors.append(f"{path}: {received} bytes, Content-Length {expected}")
                    else:
                        counts[kind] += 1
                        body_bytes += received
                        (layout_latency if kind == "layout" else data_latency).append(elapsed)
                except Exception as exc:  # every failure is counted and shown, none stops the run
                    errors.append(f"{path}: {type(exc).__name__}: {exc}")

        started = time.perf_counter()
        cpu_before = cpu_seconds(server.pid), time.process_time()
        await asyncio.gather(*(worker() for _ in range(clients)))
        wall = time.perf_counter() - started
        server_cpu = cpu_seconds(server.pid) - cpu_before[0]
        client_cpu = time.process_time() - cpu_before[1]
    buckets = {bound: n - buckets_before.get(bound, 0) for bound, n in layout_buckets(server).items()}

    def percentile(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")

    return {
        "tensors": len(names),
        "wall": wall,
        "server_cpu": server_cpu,
        "client_cpu": client_cpu,
        "counts": counts,
        "bytes": body_bytes,
        "errors": errors,
        "layout_p50": percentile(layout_latency, 0.5),
        "layout_p99": percentile(layout_latency, 0.99),
        "data_p50": percentile(data_latency, 0.5),
        "data_p99": percentile(data_latency, 0.99),
        "server_layout_p50": bucket_quantile(buckets, 0.5),
        "server_layout_p99": bucket_quantile(buckets, 0.99),
    }


LAYOUT_ROUTE = "/archives/{archive_id}/tensors/{name:path}/layout"


def layout_buckets(server: Pt2serve) -> dict[float, float]:
    """Cumulative counts of the server's time-to-first-byte histogram for the layout route."""
    from prometheus_client.parser import text_string_to_metric_families

    counts: dict[float, float] = {}
    for family in text_string_to_metric_families(fetch(server.url("/metrics")).decode()):
        if family.name != "pt2serve_request_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket") and sample.labels.get("route") == LAYOUT_ROUTE:
                counts[float(sample.labels["le"])] = sample.value
    return counts


def bucket_quantile(cumulative: dict[float, float], q: float) -> float:
    """Upper bound of the histogram bucket holding quantile q (nan without data)."""
    bounds = sorted(cumulative)
    if not bounds or not cumulative[bounds[-1]]:
        return float("nan")
    wanted = q * cumulative[bounds[-1]]
    return next(bound for bound in bounds if cumulative[bound] >= wanted)


# --------------------------------------------------------------------------- profile


def profile(server: Pt2serve, nbytes: int, downloads: int, out: pathlib.Path) -> None:
    spy = shutil.which("py-spy")
    if spy is None:
        print("  py-spy is not installed (pip install py-spy): skipped")
        return
    raw = out.with_suffix(".txt")
    command = [spy, "record", "--pid", str(server.pid), "--rate", "250", "--format", "raw", "-o", str(raw)]
    spy_process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)  # py-spy attaches
        for _ in range(downloads):
            curl(server.data_url("big1g", TENSOR))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(spy_process.pid, 2)  # SIGINT: py-spy writes its output and exits
        _, error = spy_process.communicate(timeout=30)
    if not raw.exists():
        print(f"  py-spy wrote nothing: {error.decode(errors='replace').strip()[-500:]}")
        return
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = idle = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        raw_frames = stack.split(";")
        frames = [_frame(frame) for frame in raw_frames]
        if frames[-1].startswith("_worker (") or frames[-1].startswith("Condition.wait ("):
            idle += count  # an executor thread waiting for work: py-spy does not see it as idle
            continue
        total += count
        own[frames[-1]] += count
        for frame in {_frame(f) for f in raw_frames if _own_code(f)}:
            inclusive[frame] += count
    print(f"  {total} busy samples at 250 Hz ({idle} more of idle executor threads left out) over "
          f"{downloads} downloads of 1 GiB; raw stacks: {raw}")  # fmt: skip
    print("  top frames by own time:")
    for frame, count in own.most_common(12):
        print(f"    {100 * count / total:5.1f}%  {frame}")
    print("  pt2serve's own functions (app/, reader/) by inclusive time:")
    for frame, count in inclusive.most_common(14):
        print(f"    {100 * count / total:5.1f}%  {frame}")


def _own_code(frame: str) -> bool:
    path = frame.partition(" (")[2].removeprefix(f"{ROOT}/")
    return path.startswith(("app/", "reader/")) and not path.startswith(("app/cli.py", "app/__main__.py"))


def _frame(frame: str) -> str:
    """`function (path:line)` -> `function (file)`, so lines of one function add up."""
    function, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = pathlib.PurePath(path).parts
    return f"{function} ({'/'.join(parts[-2:])})" if parts else function


# --------------------------------------------------------------------------- main


def verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def report_throughput(result: dict, nbytes: int, repeat: int) -> bool:
    ratio = result["nginx"] / result["pt2serve"]
    print(f"\n1. 1 GiB tensor, default chunk size, medians of {repeat} alternating curl runs "
          "(pt2serve: sendfile; streamed: the same server with PT2SERVE_ZERO_COPY=0):")  # fmt: skip
    gib = nbytes / 2**30
    for label in [label for label in ("pt2serve", "streamed", "nginx") if label in result]:
        median = result[label]
        runs = ", ".join(f"{gbps(nbytes, t):.2f}" for t in result["all"][label])
        print(f"  {label:<9}{gbps(nbytes, median):6.2f} GB/s ({median * 1e3:.0f} ms)   runs: {runs}")
        print(f"  {'':<9}CPU seconds per GiB: server {result['server_cpu'][label] / gib:.3f}, "
              f"curl {result['client_cpu'][label] / gib:.3f}")  # fmt: skip
    if "streamed" in result:
        print(f"  pt2serve / streamed {result['streamed'] / result['pt2serve']:.2f}x")
    passed = ratio >= RATIO_MIN
    print(f"  pt2serve / nginx {ratio:.2f}x   target >= {RATIO_MIN}x   {verdict(passed)}")
    return passed


def report_memory(memory: dict[str, int]) -> bool:
    growth = memory["peak"] - memory["baseline"]
    mib = {key: value / 2**20 for key, value in memory.items()}
    print(f"\n2. server RSS while streaming the 2 GiB tensor ({memory['seconds']:.2f} s, "
          f"{memory['samples']} samples every 20 ms):")  # fmt: skip
    print(f"  baseline {mib['baseline']:.1f} MiB, peak {mib['peak']:.1f} MiB, "
          f"VmHWM after reset {mib['hwm']:.1f} MiB")  # fmt: skip
    passed = growth <= RSS_GROWTH_MAX
    print(f"  growth {growth / 2**20:.1f} MiB   target <= {RSS_GROWTH_MAX >> 20} MiB   {verdict(passed)}")
    return passed


def report_load(outcome: dict, clients: int, archive: pathlib.Path) -> bool:
    wall, counts = outcome["wall"], outcome["counts"]
    ms = {key: outcome[key] * 1e3 for key in outcome if key.endswith(("_p50", "_p99"))}
    print(f"\n3. {clients} concurrent clients for {wall:.1f} s on {archive.name} "
          f"({outcome['tensors']} tensors), half /data, half /layout:")  # fmt: skip
    print(f"  {sum(counts.values()) / wall:.0f} requests/s ({counts['data']} data, "
          f"{counts['layout']} layout), {outcome['bytes'] / wall / 1e6:.0f} MB/s")  # fmt: skip
    print(f"  layout latency p50 {ms['layout_p50']:.1f} ms, p99 {ms['layout_p99']:.1f} ms; "
          f"data p50 {ms['data_p50']:.1f} ms, p99 {ms['data_p99']:.1f} ms")  # fmt: skip
    print(f"  server-side time to first byte of /layout (from /metrics buckets): "
          f"p50 <= {ms['server_layout_p50']:g} ms, p99 <= {ms['server_layout_p99']:g} ms")  # fmt: skip
    print(f"  CPU seconds: server {outcome['server_cpu']:.1f}, client (httpx, this process) "
          f"{outcome['client_cpu']:.1f}")  # fmt: skip
    passed = not outcome["errors"]
    print(f"  errors {len(outcome['errors'])}   target 0   {verdict(passed)}")
    for error in outcome["errors"][:10]:
        print(f"    {error}")
    return passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=pathlib.Path, default=pathlib.Path("/tmp/pt2serve-bench"))
    parser.add_argument("--repeat", type=int, default=5, help="runs per contender (default 5)")
    parser.add_argument("--chunk-sizes", default=DEFAULT_CHUNK_SIZES,
                        help="extra PT2SERVE_CHUNK_SIZE values to compare, e.g. 4M,8M; '' skips")  # fmt: skip
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of the concurrency run")
    parser.add_argument("--load-archive", type=pathlib.Path, default=None,
                        help="archive for the concurrency run (default: gpt2_small.pt2 in the cache, "
                             "else tests/fixtures/archives/many.pt2)")  # fmt: skip
    parser.add_argument("--profile", action="store_true", help="sample the server with py-spy")
    parser.add_argument("--throughput-only", action="store_true",
                        help="only part 1 (the 1 GiB tensor against nginx), no chunk sweep")  # fmt: skip
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    sweep = [parse_size(item) for item in args.chunk_sizes.split(",") if item.strip()]
    if shutil.which("curl") is None:
        print("curl is required", file=sys.stderr)
        return 2

    cache = args.cache_dir
    wanted = {"big1g": ARCHIVES["big1g"]} if args.throughput_only else ARCHIVES
    paths = {aid: ensure_single_tensor_archive(cache, filename, n) for aid, (filename, n) in wanted.items()}
    gpt2 = cache / "gpt2_small.pt2"
    load_path = args.load_archive or (gpt2 if gpt2.exists() else MANY_FIXTURE)
    served = {**paths, "load": load_path}
    for path in served.values():
        warm(path)
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} (noisy if other work runs)")

    relative = paths["big1g"].name  # nginx serves the cache directory
    results: dict[str, bool] = {}
    if args.throughput_only:
        sweep = []
    with Nginx(cache) as nginx:
        with Pt2serve(served) as server, Pt2serve(served, zero_copy=False) as streamed:
            layout = json.loads(fetch(server.url(f"/archives/big1g/tensors/{TENSOR}/layout")))
            storage = layout["storage"]
            start = data_offset(paths["big1g"], storage["entry"]) + storage["offset"]
            span = (start, start + layout["nbytes"])
            nbytes = span[1] - span[0]
            print(f"tensor {TENSOR!r} of {relative}: {nbytes / 2**30:.0f} GiB "
                  f"at file bytes [{span[0]}, {span[1]}), {storage['compression']}")  # fmt: skip

            waited = wait_zero_copy(server)
            print(f"the server sends the tensor with sendfile ({waited:.1f} s after it opened the archive)")
            before = sendfile_bytes(server)
            result = compare(server, nginx, relative, span, args.repeat, streamed)
            sent = sendfile_bytes(server) - before
            print(f"  sendfile(2) sent {sent / (nbytes * args.repeat + nbytes):.0%} of pt2serve's bytes")
            results["throughput"] = report_throughput(result, nbytes, args.repeat)
            if args.throughput_only:
                return 0 if not args.strict or results["throughput"] else 1
            memory = memory_while_streaming(server, ARCHIVES["big2g"][1] * 4)
            results["memory"] = report_memory(memory)
            outcome = asyncio.run(load(server, "load", args.clients, args.duration))
            results["concurrency"] = report_load(outcome, args.clients, load_path)
            if args.profile:
                print("\nprofile of the server streaming the 1 GiB tensor (py-spy):")
                profile(server, nbytes, 4, cache / "serve_profile")

        if sweep:
            print(f"\nchunk sizes (server restarted with PT2SERVE_CHUNK_SIZE; medians of {args.repeat}):")
            print(f"  {'chunk':>8}{'pt2serve GB/s':>15}{'nginx GB/s':>12}{'ratio':>8}")
            for size in sweep:
                with Pt2serve(served, chunk_size=size) as server:
                    result = compare(server, nginx, relative, span, args.repeat)
                rates = [gbps(nbytes, result[label]) for label in ("pt2serve", "nginx")]
                print(f"  {human(size):>8}{rates[0]:>15.2f}{rates[1]:>12.2f}{rates[0] / rates[1]:>8.2f}")

    print("\nsummary: " + ", ".join(f"{name} {verdict(ok)}" for name, ok in results.items()))
    return 1 if args.strict and not all(results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
