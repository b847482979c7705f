"""Open the GPT-2-small .pt2 over HTTP with per-request latency and list every layout: pt2serve vs others.

    python3 bench/open_remote.py [--cache-dir DIR] [--delay 0.03] [--repeat N] [--torch-repeat N]
                                 [--skip-torch] [--strict]

The archive (the one bench/open_local.py generates and caches) is served by testing/faultserver.py's
FaultServer in a separate process (testing/servers.py), which sleeps --delay seconds before answering
each request, like a far-away object store. Every run opens afresh (new client, new connection); requests
and body bytes come from the server's own log. Contenders:

  pt2serve     reader.open_archive(url) + [t.to_dict() for t in ar.tensors()]
  remotezip    remotezip.RemoteZip(url) (requests, sync) + read and json.loads the weights/constants configs
  fsspec       fsspec HTTP filesystem (aiohttp) file object + zipfile.ZipFile + the same configs
  download     httpx GET of the whole archive to a temp file + torch.export.load

Targets: pt2serve opens in 2 sequential round trips (requests <= 3 and median wall time <= 2 x delay +
--slack), and reads < 1% of the archive to open.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import statistics
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import reader  # noqa: E402, I001
from reader.sources import HttpOptions, HttpSource  # noqa: E402
from testing.servers import FaultServerProcess  # noqa: E402
from open_local import ensure_archive, list_with_zipfile  # noqa: E402

REQUESTS_MAX = 3
BYTES_FRACTION_MAX = 0.01
DEFAULT_SLACK = 0.020


# --------------------------------------------------------------------------- contenders


def list_configs(archive: zipfile.ZipFile) -> int:
    """Every tensor listed from the configs (open_local's baseline); the count."""
    return len(list_with_zipfile(archive))


async def _pt2serve(url: str) -> tuple[int, dict]:
    async with reader.open_archive(url) as ar:
        layouts = [info.to_dict() for info in ar.tensors()]
        return len(layouts), ar.stats


def run_pt2serve(url: str) -> tuple[int, dict]:
    count, stats = asyncio.run(_pt2serve(url))
    return count, stats


_SSL_CONTEXT = None


async def _pt2serve_prebuilt_ssl(url: str) -> tuple[int, dict]:
    """Informational: the same open, but the client reuses one SSL context built once per process."""
    global _SSL_CONTEXT
    import ssl

    import httpx

    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = ssl.create_default_context()
    options = HttpOptions()
    timeout = httpx.Timeout(connect=options.connect_timeout, read=options.read_timeout,
                            write=options.read_timeout, pool=None)  # fmt: skip
    client = httpx.AsyncClient(verify=_SSL_CONTEXT, timeout=timeout, follow_redirects=True)
    source = await HttpSource.open(url, options=options, client=client)  # owns the client: closes it
    async with reader.open_archive(source) as ar:
        layouts = [info.to_dict() for info in ar.tensors()]
        return len(layouts), ar.stats


def client_construction_ms(repeat: int = 9) -> float:
    """Median time of httpx.AsyncClient() alone (what reader.sources.http.make_client does per open)."""
    import httpx

    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        client = httpx.AsyncClient()
        times.append(time.perf_counter() - started)
        asyncio.run(client.aclose())
    return statistics.median(times) * 1e3


def run_remotezip(url: str) -> tuple[int, dict]:
    import remotezip

    with remotezip.RemoteZip(url) as archive:
        return list_configs(archive), {}


def run_fsspec(url: str) -> tuple[int, dict]:
    import fsspec

    fs = fsspec.filesystem("http", skip_instance_cache=True)  # a fresh session every run
    with fs.open(url, "rb") as handle, zipfile.ZipFile(handle) as archive:
        count = list_configs(archive)
    return count, {}


def run_download_torch(url: str) -> tuple[int, dict]:
    import httpx
    import torch

    with tempfile.TemporaryDirectory(prefix="pt2serve-bench-") as tmp:
        path = pathlib.Path(tmp, "model.pt2")
        started = time.perf_counter()
        with httpx.Client(timeout=120) as client, client.stream("GET", url) as response, \
                open(path, "wb") as out:  # fmt: skip
            response.raise_for_status()
            for data in response.iter_raw(1 << 20):
                out.write(data)
        downloaded = time.perf_counter() - started
        exported = torch.export.load(str(path))
        count = len(exported.state_dict) + len(exported.constants)
    return count, {"download_s": downloaded}


# --------------------------------------------------------------------------- driver


def measure(server: FaultServerProcess, name: str, run: Callable[[], tuple[int, dict]], repeat: int,
            warmup: int = 1) -> dict:  # fmt: skip
    for _ in range(warmup):  # imports and first-use costs: not counted
        run()
    server.take_log()
    times, requests, nbytes, extras = [], [], [], []
    count = 0
    for _ in range(repeat):
        started = time.perf_counter()
        count, extra = run()
        times.append(time.perf_counter() - started)
        log = server.take_log()
        requests.append(len(log))
        nbytes.append(sum(record["bytes"] for record in log))
        extras.append(extra)
    return {"name": name, "median": statistics.median(times), "min": min(times), "max": max(times),
            "runs": repeat, "tensors": count, "requests": statistics.median(requests),
            "bytes": statistics.median(nbytes), "extras": extras, "last_log": log}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=pathlib.Path, default=pathlib.Path("/tmp/pt2serve-bench"))
    parser.add_argument("--delay", type=float, default=0.030, help="seconds per request (default 0.03)")
    parser.add_argument("--repeat", type=int, default=9, help="runs of each range reader (default 9)")
    parser.add_argument("--torch-repeat", type=int, default=2, help="runs of download+torch (default 2)")
    parser.add_argument("--skip-torch", action="store_true", help="skip full download + torch.export.load")
    parser.add_argument("--slack", type=float, default=DEFAULT_SLACK,
                        help="allowed wall time over 2 x delay, seconds (default 0.02)")  # fmt: skip
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)

    path = ensure_archive(args.cache_dir)
    size = path.stat().st_size
    print(f"archive: {path} ({size / 1e6:.0f} MB); {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} (results are noisy if other work runs)")  # fmt: skip
    print(f"starting FaultServer in a separate process, {args.delay * 1e3:.0f} ms per request", flush=True)
    with FaultServerProcess(path, delay=args.delay) as server:
        url = server.url
        print(f"serving {url} (pid {server.pid})", flush=True)
        results = [
            measure(server, "pt2serve", lambda: run_pt2serve(url), args.repeat),
            measure(server, "remotezip", lambda: run_remotezip(url), args.repeat),
            measure(server, "fsspec+zipfile", lambda: run_fsspec(url), args.repeat),
        ]
        informational = measure(server, "pt2serve, SSL ctx reused",
                                lambda: asyncio.run(_pt2serve_prebuilt_ssl(url)), args.repeat)  # fmt: skip
        if not args.skip_torch:
            results.append(measure(server, "download+torch.load", lambda: run_download_torch(url),
                                   args.torch_repeat, warmup=0))  # fmt: skip

    print(f"\n{'contender':<22}{'requests':>9}{'bytes':>14}{'% of file':>10}{'median ms':>11}"
          f"{'min ms':>9}{'max ms':>9}{'runs':>5}{'tensors':>8}")  # fmt: skip
    for r in [*results, informational]:
        print(f"{r['name']:<22}{r['requests']:>9g}{r['bytes']:>14,.0f}{r['bytes'] / size * 100:>9.3f}%"
              f"{r['median'] * 1e3:>11.1f}{r['min'] * 1e3:>9.1f}{r['max'] * 1e3:>9.1f}{r['runs']:>5}"
              f"{r['tensors']:>8}")  # fmt: skip
    for r in results:
        ranges = ", ".join(f"{rec['method']} {rec['range'] or '(whole)'} -> {rec['bytes']:,} B"
                           for rec in r["last_log"])  # fmt: skip
        print(f"  {r['name']} requests (last run): {ranges}")
    pt2 = results[0]
    print(f"  informational: httpx.AsyncClient() alone takes {client_construction_ms():.1f} ms (median); "
          f"pt2serve builds one per open, and with it a new SSL context (load_verify_locations), even "
          f"for http://. The 'SSL ctx reused' row: the same open, one context per process.")  # fmt: skip
    print(f"  pt2serve stats (last run): {pt2['extras'][-1]}")
    if not args.skip_torch:
        downloads = [extra["download_s"] for extra in results[-1]["extras"]]
        print(f"  download alone: median {statistics.median(downloads) * 1e3:.0f} ms of download+torch.load")
    for r in results[1:]:
        print(
            f"  {r['name']} / pt2serve: {r['median'] / pt2['median']:.1f}x time, "
            f"{r['requests'] / pt2['requests']:.1f}x requests, {r['bytes'] / pt2['bytes']:.1f}x bytes"
        )

    wall_max = 2 * args.delay + args.slack
    checks = [
        (f"pt2serve requests to open <= {REQUESTS_MAX}", pt2["requests"] <= REQUESTS_MAX,
         f"{pt2['requests']:g}"),
        (f"pt2serve open wall <= 2 x delay + {args.slack * 1e3:.0f} ms = {wall_max * 1e3:.0f} ms",
         pt2["median"] <= wall_max, f"{pt2['median'] * 1e3:.1f} ms"),
        (f"pt2serve bytes to open < {BYTES_FRACTION_MAX:.0%} of the archive",
         pt2["bytes"] < BYTES_FRACTION_MAX * size, f"{pt2['bytes'] / size:.3%} ({pt2['bytes']:,.0f} B)"),
    ]  # fmt: skip
    print()
    failed = False
    for label, ok, value in checks:
        failed |= not ok
        print(f"{label:<58}{value:>24}   {'PASS' if ok else 'FAIL'}")
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
