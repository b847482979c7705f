"""The ExecuTorch .ptd route against the raw /data route, and our .ptd's size against ExecuTorch's own.

    python3 bench/ptd.py [--cache-dir DIR] [--repeat N] [--no-sizes]

1. Over HTTP, on the GPT-2-small archive (generated once with torch, cached in --cache-dir;
   149 tensors, 498 MB, lm_head tied to wte): pt2serve (`python3 -m app serve`, a child
   process) on 127.0.0.1, fetched with curl to /dev/null, runs alternating, medians of --repeat:
   - time to first byte (curl's time_starttransfer) of `GET /archives/gpt2/ptd` (the whole
     file) against `GET .../tensors/wte.weight/data` (the raw bytes of the largest tensor):
     the first request after start-up ("first", which plans the .ptd's FlatBuffer: the plan
     is then cached) and the median of the timed runs;
   - throughput of the whole .ptd against the same bytes as raw /data: every tensor the .ptd
     holds fetched with one curl over one keep-alive connection, and (informational) the
     largest tensor alone. GB/s = 1e9 B/s.
   The .ptd route plans the header and FlatBuffer from layouts and then streams the
   tensors, so the target is that it costs little over /data: ratio >= 0.8, TTFB <= 2x + 5 ms.
2. Sizes (needs executorch): for the three small test models (MLP, conv net, transformer block)
   and the fixture archives ExecuTorch can export, the bytes of our .ptd against the .ptd
   ExecuTorch writes for the same program, with key counts (we write every name of the
   model, ExecuTorch only those its program uses).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.open_local import ensure_archive  # noqa: E402
from bench.serve import Pt2serve, gbps  # noqa: E402

RATIO_MIN = 0.8


def curl_timing(urls: list[str]) -> tuple[float, float, int]:
    """(time to first byte of the first transfer, total seconds, bytes) of one curl run over `urls`
    on one connection, bodies to /dev/null."""
    command = ["curl", "-s", "--fail", "-w", "%{time_starttransfer} %{time_total} %{size_download}\\n"]
    for url in urls:
        command += ["-o", "/dev/null", url]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    rows = [line.split() for line in done.stdout.splitlines()]
    first_byte = float(rows[0][0])
    # per transfer time_total restarts at each URL; they run back to back
    total = sum(float(row[1]) for row in rows)
    return first_byte, total, sum(int(row[2]) for row in rows)


def http_figures(server: Pt2serve, names: list[str], ptd_length: int, repeat: int) -> dict:
    data_urls = [server.url(f"/archives/gpt2/tensors/{name}/data") for name in names]
    contenders = {
        "ptd": [server.url("/archives/gpt2/ptd")],
        "data (every tensor)": data_urls,
        "data (wte.weight)": [server.url("/archives/gpt2/tensors/wte.weight/data")],
    }
    # first request of each route after start-up (the server's own first request warmed it up before)
    curl_timing([server.url("/archives/gpt2/tensors/wpe.weight/data")])
    cold = {label: curl_timing(urls)[0] for label, urls in reversed(contenders.items())}
    runs: dict[str, list[tuple[float, float, int]]] = {label: [] for label in contenders}
    for _ in range(repeat):
        for label, urls in contenders.items():
            runs[label].append(curl_timing(urls))
    out = {}
    for label, values in runs.items():
        sizes = {size for _, _, size in values}
        assert len(sizes) == 1, (label, sizes)
        out[label] = {
            "ttfb": statistics.median(v[0] for v in values),
            "seconds": statistics.median(v[1] for v in values),
            "bytes": sizes.pop(),
            "cold_ttfb": cold[label],
        }
    assert out["ptd"]["bytes"] == ptd_length
    return out


def ptd_plan_of(path: pathlib.Path):
    import asyncio

    import reader
    from reader.formats import ptd

    async def plan():
        async with reader.open_archive(path) as ar:
            return ptd.plan_ptd([t for t in ar.tensors(model=ar.resolve_model(None)) if ptd.writable(t)])

    return asyncio.run(plan())


def size_figures() -> list[tuple[str, int, int, int, int]]:
    """(name, our bytes, ExecuTorch's bytes, our keys, its keys)."""
    from testing.executorch_models import export_models
    from testing.executorch_oracle import executorch_ptd, read_ptd
    from testing.paths import ARCHIVES

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        models = export_models(pathlib.Path(folder))
        sources = [(name, m.archive, m.executorch_ptd) for name, m in models.items()]
        for fixture in ("layouts", "many", "two_models"):
            path = ARCHIVES / f"{fixture}.pt2"
            model = "encoder" if fixture == "two_models" else "model"
            sources.append((f"{fixture}.pt2", path, executorch_ptd(path, model)))
        for name, path, theirs in sources:
            ours = ours_for(path, "encoder" if name == "two_models.pt2" else None)
            rows.append((name, len(ours), len(theirs), len(read_ptd(ours)), len(read_ptd(theirs))))
    return rows


def ours_for(path: pathlib.Path, model: str | None) -> bytes:
    import asyncio

    import reader
    from reader.formats import ptd
    from reader.formats.body import read_body

    async def build() -> bytes:
        async with reader.open_archive(path) as ar:
            tensors = [t for t in ar.tensors(model=ar.resolve_model(model)) if ptd.writable(t)]
            body = ptd.ptd_body(ptd.plan_ptd(tensors), lambda i, o: ar.tensor(i.name, model=i.model, order=o))
            return await read_body(body, 0, body.length, 1 << 20)

    return asyncio.run(build())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cache-dir", type=pathlib.Path, default=pathlib.Path("/tmp/pt2serve-bench"))
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--no-sizes", action="store_true", help="skip the ExecuTorch size comparison")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)

    archive = ensure_archive(args.cache_dir)
    plan = ptd_plan_of(archive)
    stored = {(s.source.name) for s in plan.segments}
    names = [e.info.name for e in plan.entries if e.info.name in stored]  # each stored payload once
    print(f"archive {archive} ({archive.stat().st_size / 1e6:.0f} MB), .ptd {plan.length / 1e6:.1f} MB, "
          f"{len(plan.entries)} keys in {len(plan.segments)} segments")  # fmt: skip
    with Pt2serve({"gpt2": archive}) as server:
        figures = http_figures(server, names, plan.length, args.repeat)
    print(f"\nHTTP, medians of {args.repeat} alternating curl runs")
    print(f"{'route':<22}{'first TTFB ms':>14}{'TTFB ms':>10}{'seconds':>10}{'MB':>10}{'GB/s':>8}")
    for label, f in figures.items():
        print(f"{label:<22}{f['cold_ttfb'] * 1e3:>14.2f}{f['ttfb'] * 1e3:>10.2f}{f['seconds']:>10.3f}"
              f"{f['bytes'] / 1e6:>10.1f}{gbps(f['bytes'], f['seconds']):>8.2f}")  # fmt: skip
    ptd_rate = gbps(figures["ptd"]["bytes"], figures["ptd"]["seconds"])
    data_rate = gbps(figures["data (every tensor)"]["bytes"], figures["data (every tensor)"]["seconds"])
    ratio = ptd_rate / data_rate
    ttfb_ok = figures["ptd"]["ttfb"] <= 2 * figures["data (wte.weight)"]["ttfb"] + 0.005
    passed = ratio >= RATIO_MIN and ttfb_ok
    verdict = "PASS" if ratio >= RATIO_MIN else "FAIL"
    print(f"ptd / data throughput: {ratio:.2f} ({verdict}, target >= {RATIO_MIN})")
    print(f"ptd TTFB vs data TTFB: {figures['ptd']['ttfb'] * 1e3:.2f} ms vs "
          f"{figures['data (wte.weight)']['ttfb'] * 1e3:.2f} ms ({'PASS' if ttfb_ok else 'FAIL'}, "
          "target <= 2x + 5 ms)")  # fmt: skip

    if not args.no_sizes:
        print("\n.ptd sizes: ours vs ExecuTorch's own for the same program")
        print(f"{'model':<18}{'ours B':>10}{'theirs B':>10}{'ratio':>8}{'our keys':>10}{'their keys':>12}")
        for name, ours, theirs, our_keys, their_keys in size_figures():
            print(f"{name:<18}{ours:>10}{theirs:>10}{ours / theirs:>8.3f}{our_keys:>10}{their_keys:>12}")
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
