"""The service in front of remote storage, and its small requests: pt2serve vs nginx and bare Starlette.

    python3 bench/serve_remote.py [--cache-dir DIR] [--repeat N] [--duration 5] [--skip-small] [--strict]

The archive is bench/stream_local.py's (one 512 MiB float32 tensor "big", cached). Processes, all on
127.0.0.1, each stopped by its PID: an upstream nginx serving the cache directory; an nginx proxy
(`proxy_pass` to that upstream, 1 MiB proxy buffers, no temp file); pt2serve (`python -m app serve`,
uvicorn + uvloop + httptools, metrics on, access log at its default: off) with two archives, `remote`
(the http URL of the upstream nginx) and `local` (the same file by path); and, for the small
requests, a bare Starlette app under uvicorn + httptools that returns the same bytes.

Rows, each with its baseline measured in the same run (runs alternate in a balanced order; medians):
1. `/data` of the remote archive (curl → pt2serve → nginx) vs curl through the nginx proxy, same
   range from the same upstream. Target >= 0.8x. Informational: curl straight from the upstream, and
   the proxy against itself (the control: how far apart two runs of one contender land on this host).
   Each round's ratio is printed with the median's 95% interval (bench/_rounds.py).
2. RSS of pt2serve while streaming 2 GiB from the remote archive (four 512 MiB downloads back to
   back; baseline: RSS before). Target: growth <= 64 MiB.
3. `wrk -c32` on `.../layout` and on a 64 KiB Range of `/data` (local archive, page cache) vs the bare
   handler returning the same bytes. Target >= 0.5x. Informational, for the Range: the contract floor,
   a handler in the bare app that does the least the HTTP contract asks (DESIGN.md): it preads the
   range from the archive file and answers with the same fields pt2serve sends (ETag, Repr-Digest,
   X-Tensor-*, Cache-Control, Content-Location, ...), all but Content-Range fixed. Its ratio to the
   bare handler is what the contract costs under uvicorn; pt2serve's ratio to it is what ours costs.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from functools import partial
from typing import NamedTuple

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._host import cpu_times, steal_note  # noqa: E402
from bench._rounds import alternate, compare  # noqa: E402
from bench.serve import Pt2serve, curl, data_offset, fetch, read_status  # noqa: E402
from bench.stream_local import TENSOR_NAME, ensure_archive  # noqa: E402
from testing.servers import HOST, NginxProcess, free_port, stop_process, wait_listening  # noqa: E402

PROXY_MIN, RSS_MAX, SMALL_MIN = 0.8, 64 << 20, 0.5
SMALL_RANGE = 64 << 10

BARE_APP = """
import json, os, pathlib
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
LAYOUT = pathlib.Path(os.environ["BARE_LAYOUT"]).read_bytes()
DATA = pathlib.Path(os.environ["BARE_DATA"]).read_bytes()
async def layout(request):
    return Response(LAYOUT, media_type="application/json")
async def data(request):
    return Response(DATA, status_code=206, media_type="application/octet-stream",
                    headers={"content-range": f"bytes 0-{len(DATA) - 1}/{len(DATA)}"})
routes = [Route("/layout", layout), Route("/data", data)]
if "BARE_FLOOR_FILE" in os.environ:  # the contract floor: pread the range, pt2serve's fields
    FD = os.open(os.environ["BARE_FLOOR_FILE"], os.O_RDONLY)
    OFFSET, LENGTH = map(int, os.environ["BARE_FLOOR_SPAN"].split(","))
    FIELDS = json.loads(os.environ["BARE_FLOOR_FIELDS"])
    async def floor(request):
        first, last = map(int, request.headers["range"].removeprefix("bytes=").split("-"))
        return Response(os.pread(FD, last + 1 - first, OFFSET + first), status_code=206,
                        headers={**FIELDS, "content-range": f"bytes {first}-{last}/{LENGTH}"})
    routes.append(Route("/floor", floor))
app = Starlette(routes=routes)
"""


class ContractFloor(NamedTuple):
    """The tensor the floor route reads: its archive, where its bytes start, how many there are,
    and the fields to answer with (pt2serve's, bar those the response makes itself)."""

    path: pathlib.Path
    offset: int
    length: int
    fields: dict[str, str]


class BareStarlette:
    """The small-request baseline: uvicorn + httptools + uvloop, no access log, one handler per route."""

    def __init__(
        self, layout: bytes, data: bytes, prefix: Sequence[str] = (), floor: ContractFloor | None = None
    ) -> None:
        self._tmp = tempfile.mkdtemp(prefix="pt2serve-bare-")
        folder = pathlib.Path(self._tmp)
        (folder / "bare_app.py").write_text(BARE_APP)
        (folder / "layout.json").write_bytes(layout)
        (folder / "data.bin").write_bytes(data)
        self.port = free_port()
        env = {
            **os.environ,
            "BARE_LAYOUT": str(folder / "layout.json"),
            "BARE_DATA": str(folder / "data.bin"),
        }
        if floor is not None:
            env["BARE_FLOOR_FILE"] = str(floor.path)
            env["BARE_FLOOR_SPAN"] = f"{floor.offset},{floor.length}"
            env["BARE_FLOOR_FIELDS"] = json.dumps(floor.fields)
        command = [*prefix, sys.executable, "-m", "uvicorn", "bare_app:app", "--port", str(self.port),
                   "--host", HOST, "--http", "httptools", "--loop", "uvloop", "--no-access-log",
                   "--log-level", "warning"]  # fmt: skip
        self.process = subprocess.Popen(command, cwd=folder, env=env, stdin=subprocess.DEVNULL)
        wait_listening(self.port, self.process, "bare starlette", 300.0 if prefix else 30.0)

    def url(self, path: str) -> str:
        return f"http://{HOST}:{self.port}{path}"

    def __enter__(self) -> BareStarlette:
        return self

    def __exit__(self, *exc_info: object) -> None:
        stop_process(self.process)
        shutil.rmtree(self._tmp, ignore_errors=True)


def wrk(url: str, duration: float, headers: dict[str, str] | None = None) -> float:
    """Requests/s of `wrk -t2 -c32` (non-2xx answers fail the run)."""
    command = ["wrk", "-t2", "-c32", f"-d{max(1, round(duration))}s", "--latency"]
    for name, value in (headers or {}).items():
        command += ["-H", f"{name}: {value}"]
    out = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out:
        raise AssertionError(f"wrk {url}: non-2xx answers\n{out}")
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def rss_while(pid: int, work) -> int:
    """Peak VmRSS growth of `pid` (bytes) while `work()` runs, sampled every 20 ms."""
    base = read_status(pid)["VmRSS"]
    peak, done = base, threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, read_status(pid)["VmRSS"])
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        work()
    finally:
        done.set()
        sampler.join()
    return peak - base


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=pathlib.Path, default=pathlib.Path("/tmp/pt2serve-bench"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    parser.add_argument("--skip-small", action="store_true", help="skip the wrk rows")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    for tool in ("curl", "wrk"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed")
            return 1
    path = ensure_archive(args.cache_dir)
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; medians of {args.repeat} "
          "alternating runs", flush=True)  # fmt: skip
    passed = []
    with (
        NginxProcess(path.parent) as upstream,
        NginxProcess(path.parent, proxy_to=upstream.base_url) as proxy,
    ):
        remote = upstream.url(path.name)
        with Pt2serve({"remote": remote, "local": path}) as server:  # type: ignore[dict-item]
            layout_url = server.url(f"/archives/remote/tensors/{TENSOR_NAME}/layout")
            info = json.loads(fetch(layout_url))
            nbytes = info["nbytes"]
            start = data_offset(path, info["storage"]["entry"]) + info["storage"]["offset"]
            span = (start, start + nbytes - 1)
            data_url = server.data_url("remote", TENSOR_NAME)
            print(f"\n1. /data of a {nbytes >> 20} MiB tensor from remote storage", flush=True)
            for url, rng in ((data_url, None), (proxy.url(path.name), span), (remote, span)):
                curl(url, rng)  # warm-up
            since = cpu_times()
            times = alternate({
                "pt2serve": lambda: _checked(curl(data_url), nbytes),
                "proxy": lambda: _checked(curl(proxy.url(path.name), span), nbytes),
                "proxy again": lambda: _checked(curl(proxy.url(path.name), span), nbytes),  # the control
                "upstream": lambda: _checked(curl(remote, span), nbytes),
            }, args.repeat)  # fmt: skip
            med = {label: statistics.median(values) for label, values in times.items()}
            ratio = med["proxy"] / med["pt2serve"]
            passed.append(ratio >= PROXY_MIN)
            for label in med:
                print(f"   {label:<11} {nbytes / med[label] / 1e9:5.2f} GB/s  (runs: "
                      f"{', '.join(f'{nbytes / t / 1e9:.2f}' for t in times[label])})")  # fmt: skip
            print(f"   pt2serve / nginx proxy_pass: {ratio:.2f}x  target >= {PROXY_MIN}x  "
                  f"{verdict(passed[-1])}   (/ curl straight from upstream: "
                  f"{med['upstream'] / med['pt2serve']:.2f}x)")  # fmt: skip
            print(f"   {compare(times, 'pt2serve', 'proxy', PROXY_MIN)}")
            print(f"   control, {compare(times, 'proxy again', 'proxy', 1.0)}")
            print(f"   {steal_note(since)}")

            print("\n2. RSS growth while streaming 2 GiB (4 x 512 MiB) from the remote archive", flush=True)
            growth = rss_while(server.pid, lambda: [_checked(curl(data_url), nbytes) for _ in range(4)])
            passed.append(growth <= RSS_MAX)
            print(f"   growth {growth / 2**20:.1f} MiB  target <= {RSS_MAX >> 20} MiB  {verdict(passed[-1])}")

            if not args.skip_small:
                passed += small_requests(server, args)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    print(f"overall: {verdict(all(passed))}")
    return 1 if args.strict and not all(passed) else 0


def small_requests(server: Pt2serve, args: argparse.Namespace) -> list[bool]:
    layout_path = f"/archives/local/tensors/{TENSOR_NAME}/layout"
    data_path = f"/archives/local/tensors/{TENSOR_NAME}/data"
    layout = fetch(server.url(layout_path))
    rng = {"Range": f"bytes=0-{SMALL_RANGE - 1}"}
    data, fields = _range(server.url(data_path), SMALL_RANGE)
    results = []
    with BareStarlette(layout, data, floor=contract_floor(server, layout, fields)) as bare:
        if _range(bare.url("/floor"), SMALL_RANGE)[0] != data:
            raise AssertionError("the contract floor's bytes differ from pt2serve's")
        for what, ours, theirs, headers in (
            ("layout", server.url(layout_path), bare.url("/layout"), None),
            ("64 KiB Range of /data", server.url(data_path), bare.url("/data"), rng),
        ):
            print(f"\n3. {what}: wrk -t2 -c32 -d{args.duration:g}s", flush=True)
            contenders = {"pt2serve": ours, "bare": theirs}
            if headers is rng:
                contenders["floor"] = bare.url("/floor")
            for url in contenders.values():
                wrk(url, 1.0, headers)  # warm-up
            since = cpu_times()
            runs = {label: partial(wrk, url, args.duration, headers) for label, url in contenders.items()}
            rates = alternate(runs, args.repeat)
            med = {label: statistics.median(values) for label, values in rates.items()}
            ratio = med["pt2serve"] / med["bare"]
            results.append(ratio >= SMALL_MIN)
            print(f"   pt2serve {med['pt2serve']:8.0f} req/s   bare Starlette {med['bare']:8.0f} req/s   "
                  f"{ratio:.2f}x  target >= {SMALL_MIN}x  {verdict(results[-1])}")  # fmt: skip
            if "floor" in med:
                floor = med["floor"]
                print(f"   contract floor {floor:8.0f} req/s: {floor / med['bare']:.2f}x bare; "
                      f"pt2serve {med['pt2serve'] / floor:.2f}x the floor  (informational)")  # fmt: skip
            for label, values in rates.items():
                print(f"   runs: {label} {', '.join(f'{r:.0f}' for r in values)}")
            print(f"   {steal_note(since)}")
    return results


def contract_floor(server: Pt2serve, layout: bytes, fields: dict[str, str]) -> ContractFloor:
    """The floor route's tensor: the local archive's, answered with pt2serve's fields."""
    info = json.loads(layout)
    path = server.archives["local"]
    offset = data_offset(path, info["storage"]["entry"]) + info["storage"]["offset"]
    made = ("content-length", "content-range", "date", "server")  # by the response or uvicorn
    hop = ("connection", "keep-alive", "transfer-encoding")  # of urllib's connection, not the answer's
    kept = {name: value for name, value in fields.items() if name not in made + hop}
    return ContractFloor(path, offset, info["nbytes"], kept)


def _range(url: str, length: int) -> tuple[bytes, dict[str, str]]:
    """The body and the header fields (lower-case names) of a Range request for the first bytes."""
    import urllib.request

    request = urllib.request.Request(url, headers={"Range": f"bytes=0-{length - 1}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read(), {name.lower(): value for name, value in response.headers.items()}


def _checked(result: tuple[float, int, int], nbytes: int) -> float:
    seconds, size, status = result
    if size != nbytes or status not in (200, 206):
        raise AssertionError(f"HTTP {status}, {size} bytes (expected {nbytes})")
    return seconds


if __name__ == "__main__":
    sys.exit(main())
