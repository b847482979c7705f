"""Instructions per small request, pt2serve vs the bare Starlette handler, counted by callgrind.

    python3 bench/instructions.py [--requests 3200] [--cache-dir DIR]

Why: on this shared VM a wrk rate moves by a third between runs, more than most single changes to
the request path are worth (bench/README.md). The user-space instructions a server runs per
request do not: repeated runs agree to well under 1%. Each change to the small-request path was
measured here first; the wrk rows of bench/serve_remote.py then give the requests/s ratio that the
target is about. Kernel work (the syscalls, loopback TCP) is not counted, and valgrind counts a
`rep movsb` copy one instruction per byte: the copy of a 64 KiB body shows as about 65,000
instructions, though it takes 2 - 3 microseconds. The script prints that share apart.

The servers are those of bench/serve_remote.py's small rows (pt2serve's `local` archive, the same
bytes from the bare handler), each under `valgrind --tool=callgrind`. For each kind of request: a
warm-up, a counter dump (callgrind zeroes its counters at a dump), N requests over 32 keep-alive
connections (status and length checked), a dump; instructions / N.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.serve import Pt2serve, fetch  # noqa: E402
from bench.serve_remote import SMALL_RANGE, BareStarlette, _range  # noqa: E402
from bench.stream_local import TENSOR_NAME, ensure_archive  # noqa: E402

CONNECTIONS = 32
TOTAL = re.compile(r"^\s*([\d,]+) \(100\.0+%\)\s+PROGRAM TOTALS", re.M)
# a line of callgrind_annotate for one of glibc's copy routines: its instruction count
COPY = re.compile(r"^\s*([\d,]+) \([\d.]+%\)\s+\S*?__mem(?:cpy|move)\w*", re.M)


class Counted:
    """A server process under callgrind: dump its counters and read how many instructions ran."""

    def __init__(self, folder: pathlib.Path, label: str) -> None:
        self.out = folder / f"callgrind.{label}"
        self.prefix = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.out}.%p"]
        self.prefix.append(f"--log-file={folder}/{label}.log")  # not the benchmark's output

    def dump(self, pid: int) -> tuple[int, int]:
        """(instructions, of which copying) since the last dump."""
        before = set(self.out.parent.glob(f"{self.out.name}.{pid}*"))
        subprocess.run(["callgrind_control", "--dump", str(pid)], check=True, capture_output=True)
        deadline = time.monotonic() + 60
        while not (new := set(self.out.parent.glob(f"{self.out.name}.{pid}*")) - before):
            if time.monotonic() > deadline:
                raise RuntimeError("callgrind wrote no dump")
            time.sleep(0.2)
        path = max(new, key=lambda p: p.stat().st_mtime)
        time.sleep(0.5)  # the dump is written by the server process itself
        report = subprocess.run(
            ["callgrind_annotate", "--threshold=100", "--inclusive=no", str(path)],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        total = int(TOTAL.search(report)[1].replace(",", ""))
        copies = sum(int(match[1].replace(",", "")) for match in COPY.finditer(report))
        return total, copies


async def _requests(url: str, count: int, headers: dict[str, str], length: int) -> None:
    """`count` GETs of `url` over CONNECTIONS keep-alive connections; each answer 2xx of `length` bytes."""
    host, _, rest = url.removeprefix("http://").partition("/")
    name, _, port = host.partition(":")
    fields = "".join(f"{key}: {value}\r\n" for key, value in headers.items())
    request = f"GET /{rest} HTTP/1.1\r\nHost: {host}\r\n{fields}\r\n".encode()

    async def connection(n: int) -> None:
        reader, writer = await asyncio.open_connection(name, int(port))
        for _ in range(n):
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            size = int(re.search(rb"(?im)^content-length:\s*(\d+)", head)[1])
            if not 200 <= status < 300 or size != length:
                raise AssertionError(f"{url}: HTTP {status}, {size} bytes (expected {length})")
            await reader.readexactly(size)
        writer.close()

    await asyncio.gather(*(connection(count // CONNECTIONS) for _ in range(CONNECTIONS)))


def per_request(
    counted: Counted, pid: int, url: str, count: int, headers: dict[str, str], length: int
) -> tuple[float, float]:
    """(instructions, of which copying) per request of `count` requests, after a warm-up."""
    asyncio.run(_requests(url, max(CONNECTIONS, count // 5), headers, length))  # warm-up
    counted.dump(pid)
    asyncio.run(_requests(url, count, headers, length))
    total, copies = counted.dump(pid)
    done = count // CONNECTIONS * CONNECTIONS
    return total / done, copies / done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=pathlib.Path, default=pathlib.Path("/tmp/pt2serve-bench"))
    parser.add_argument("--requests", type=int, default=3200)
    args = parser.parse_args(argv)
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed (apt-get install valgrind)")
            return 1
    path = ensure_archive(args.cache_dir)
    folder = pathlib.Path(tempfile.mkdtemp(prefix="pt2serve-instructions-"))
    rng = {"Range": f"bytes=0-{SMALL_RANGE - 1}"}
    try:
        ours, theirs = Counted(folder, "pt2serve"), Counted(folder, "bare")
        with Pt2serve({"local": path}, prefix=ours.prefix) as server:
            layout_url = server.url(f"/archives/local/tensors/{TENSOR_NAME}/layout")
            data_url = server.url(f"/archives/local/tensors/{TENSOR_NAME}/data")
            layout, data = fetch(layout_url), _range(data_url, SMALL_RANGE)[0]
            kinds = {"layout": (layout_url, {}, len(layout)), "64 KiB Range": (data_url, rng, len(data))}
            counts = {}
            for kind, (url, headers, length) in kinds.items():
                counts[kind] = per_request(ours, server.pid, url, args.requests, headers, length)
        with BareStarlette(layout, data, prefix=theirs.prefix) as bare:
            for kind, url, headers, length in (
                ("layout", bare.url("/layout"), {}, len(layout)),
                ("64 KiB Range", bare.url("/data"), rng, len(data)),
            ):
                total, copies = per_request(theirs, bare.process.pid, url, args.requests, headers, length)
                mine, my_copies = counts[kind]
                print(f"{kind:>13}: pt2serve {mine / 1e3:6.1f} k instructions/request "
                      f"({my_copies / 1e3:.1f} k copying)   bare Starlette {total / 1e3:6.1f} k "
                      f"({copies / 1e3:.1f} k)   ratio {mine / total:.2f}x", flush=True)  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"(user space only; {os.cpu_count()} CPUs; {args.requests} requests per count)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
