"""A slice of one row of a 147 MiB embedding over HTTP, against the whole tensor in the same run.

    python3 bench/slice.py [--cache-dir DIR] [--repeat N] [--delay S]

The GPT-2-small archive (bench/make_gpt2.py; generated once with torch, cached) holds `wte.weight`,
50257 x 768 float32 = 147 MiB. pt2serve serves it (uvicorn in a thread of this process) three times:

- local: the archive is a local file;
- remote: the archive is behind nginx on loopback, so every byte the service reads is an HTTP
  range request it makes (a service in front of object storage);
- remote with latency: behind testing/faultserver.py in a child process that waits --delay seconds
  before answering each request (a store across a network: what a round trip costs shows).

The first slice on a fresh server also reads the entry's local header (where its data starts);
it is measured --repeat times, each on a fresh server (median). Then each round (alternating,
medians of --repeat) one client request `GET .../wte.weight/data?slice=R` for a random row R, and
one `GET .../wte.weight/data` of the whole tensor (not behind the delay). The service's own counters
(`Archive.stats`, purpose "data") give the bytes and requests each cost.

Targets: one client request, bytes read <= the row + its local header (issue 35); the first slice in
one round trip: under the delay, at most 1.5 x delay (issue 54: the header and the row requested
together, not one after the other, which takes 2 x delay).
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import random
import statistics
import sys
import threading
import time

import httpx
import uvicorn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from app.main import create_app
from app.settings import Settings, parse_archive_specs
from bench._host import cpu_times, steal_note
from bench.make_gpt2 import DEFAULT_CACHE, ensure_gpt2
from reader import zipfmt
from testing.servers import FaultServerProcess, NginxProcess, free_port

NAME = "wte.weight"
ROWS, WIDTH = 50257, 768
ROW = WIDTH * 4


class Service:
    """pt2serve over one archive spec, under uvicorn in a thread; its archive's counters readable.
    No digests computed ahead (they would read every tensor in the background while we count)."""

    def __init__(self, location: str) -> None:
        self.app = create_app(
            Settings(
                archives=parse_archive_specs([f"gpt2={location}"]), revalidate_seconds=0, digests_ahead="off"
            )
        )
        self.config = uvicorn.Config(self.app, host="127.0.0.1", port=free_port(), log_level="warning")
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)

    def __enter__(self) -> Service:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.config.port}/archives/gpt2/tensors/{NAME}/data"
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def counters(self) -> tuple[int, int]:
        archive = self.app.state.registry.slot("gpt2").archive
        data = archive.stats.get("data", {}) if archive is not None else {}
        return data.get("requests", 0), data.get("bytes", 0)

    def header(self) -> tuple[int, int]:
        """(the entry's local header length, what a first read of it asks for: reader's guess)."""
        archive = self.app.state.registry.slot("gpt2").archive
        entry = archive._entries[archive.layout(NAME).storage.entry]
        length = archive._fetcher.offsets.known(entry.name) - entry.header_offset
        return length, zipfmt.local_header_guess(entry)


def timed(client: httpx.Client, service: Service, params: dict[str, str]) -> tuple[float, int, int, bytes]:
    """(seconds, source requests, source bytes, body) of one client request."""
    requests, read = service.counters()
    started = time.perf_counter()
    response = client.get(service.url, params=params)
    seconds = time.perf_counter() - started
    response.raise_for_status()
    after = service.counters()
    return seconds, after[0] - requests, after[1] - read, response.content


def cold_slices(location: str, repeat: int, rng: random.Random) -> tuple[list[tuple], int, int]:
    """The first slice on `repeat` fresh servers: (seconds, requests, bytes, body length) each, and
    the entry's local header length and the guess its first read asks for."""
    cold = []
    for _ in range(repeat):
        with Service(location) as service, httpx.Client(timeout=300) as client:
            client.get(service.url.replace(f"/tensors/{NAME}/data", "/tensors"))  # open the archive
            seconds, requests, read, body = timed(client, service, {"slice": str(rng.randrange(ROWS))})
            cold.append((seconds, requests, read, len(body)))
            header, guess = service.header()
    return cold, header, guess


def run(location: str, label: str, repeat: int, whole_bytes: bytes | None, delay: float = 0.0) -> bytes:
    rng = random.Random(0)
    cold, header, guess = cold_slices(location, repeat, rng)
    slices, wholes = [], []
    with Service(location) as service, httpx.Client(timeout=300) as client:
        timed(client, service, {"slice": str(rng.randrange(ROWS))})  # the header known from here on
        for turn in range(repeat):
            order = ("slice", "whole") if turn % 2 == 0 else ("whole", "slice")
            for kind in order:
                if kind == "slice":
                    row = rng.randrange(ROWS)
                    seconds, requests, read, body = timed(client, service, {"slice": str(row)})
                    if whole_bytes is not None:
                        assert body == whole_bytes[row * ROW : (row + 1) * ROW], "wrong bytes"
                    slices.append((seconds, requests, read, len(body)))
                elif not delay:
                    seconds, requests, read, body = timed(client, service, {})
                    assert len(body) == ROWS * ROW
                    whole_bytes = whole_bytes or body
                    wholes.append((seconds, requests, read, len(body)))
    slice_s = statistics.median(s[0] for s in slices)
    print(f"\n{label}: {location}")
    print("| request | client requests | source requests | bytes read | body bytes | median time |")
    print("| --- | --- | --- | --- | --- | --- |")
    cold_s = statistics.median(c[0] for c in cold)
    requests, read = statistics.median(c[1] for c in cold), statistics.median(c[2] for c in cold)
    verdict = "PASS" if max(c[2] for c in cold) <= ROW + guess else "FAIL"
    bytes_read = (
        f"{read:,.0f} (row + {read - ROW:.0f}: the {header}-byte local header read as a {guess}-byte "
        f"guess; <= row + guess: **{verdict}**)"
    )
    times = ", ".join(f"{c[0] * 1e3:.1f}" for c in cold)
    latency = f"{cold_s * 1e3:.1f} ms ({times})"
    if delay:
        rounds = "one round trip: **PASS**" if cold_s <= 1.5 * delay else "one round trip: **FAIL**"
        latency += f"; {cold_s / delay:.2f} x delay, {rounds}"
    print(f"| first slice (cold) | 1 | {requests:g} | {bytes_read} | {ROW:,} | {latency} |")
    requests = statistics.median(s[1] for s in slices)
    read = statistics.median(s[2] for s in slices)
    warm = f"{slice_s * 1e3:.2f} ms" + (f" ({slice_s / delay:.2f} x delay)" if delay else "")
    print(f"| slice of one row | 1 | {requests:g} | {read:,.0f} | {ROW:,} | {warm} |")
    if wholes:
        whole_s = statistics.median(w[0] for w in wholes)
        requests = statistics.median(w[1] for w in wholes)
        read = statistics.median(w[2] for w in wholes)
        whole = f"{requests:g} | {read:,.0f} | {ROWS * ROW:,} | {whole_s * 1e3:.1f} ms"
        print(f"| baseline: whole tensor | 1 | {whole} |")
        print(f"slice / whole time: {slice_s / whole_s:.4f} ({whole_s / slice_s:.0f}x faster)")
    return whole_bytes or b""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=pathlib.Path, default=DEFAULT_CACHE)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds per request (default 0.05)")
    args = parser.parse_args()
    archive, _ = ensure_gpt2("gpt2", args.cache_dir)
    since = cpu_times()
    whole = run(str(archive), "local archive", args.repeat, None)
    with NginxProcess(archive.parent) as nginx:
        run(nginx.url(archive.name), "remote archive (nginx)", args.repeat, whole)
    with FaultServerProcess(archive, delay=args.delay) as server:
        label = f"remote archive, {args.delay * 1e3:.0f} ms a request (FaultServer)"
        run(server.url, label, args.repeat, whole, delay=args.delay)
    print(f"\n{steal_note(since)}")


if __name__ == "__main__":
    main()
