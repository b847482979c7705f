"""The viewer's graph tab in headless Chromium: GPT-2 small and a generated 10,002-node program.

    python3 bench/graph_view.py [--cache-dir DIR] [--repeat N] [--strict]

The service runs as `python -m app serve` in its own process. Each repetition is a fresh page:
load the tensor table, click the graph tab, time until the graph is drawn; for the 10,002-node
program also time expanding one 50-block stage. The baseline, in the same run and the same
browser, is what Netron must do before it can draw anything: download the whole archive into
the page (`fetch(...).arrayBuffer()` from a static file server on loopback).

Targets: GPT-2 small interactive < 1 s after the click; 10,002 nodes open collapsed < 3 s;
expanding a group < 0.5 s. Medians of --repeat runs (default 5).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.open_local import ensure_archive  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
TARGETS = {"gpt2": 1000.0, "stack10k": 3000.0, "expand": 500.0}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def process(cmd: list[str], ready_url: str, env: dict[str, str] | None = None):
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(ready_url, timeout=2).status_code < 500:
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{cmd[:4]} did not start")
            time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        proc.wait(10)


def time_graph(browser, base: str, archive: str, expand: str | None) -> tuple[float, float | None]:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(f"{base}/#/archive/{archive}")
        page.wait_for_selector("[data-testid=tensor-row]")
        started = page.evaluate("performance.now()")
        page.click("[data-testid=tab-graph]")
        page.wait_for_selector("[data-testid=graph-node]")
        opened = page.evaluate("performance.now()") - started
        expanded = None
        if expand:
            started = page.evaluate("performance.now()")
            page.click(f"[data-testid=graph-group][data-module='{expand}']")
            page.wait_for_selector(f"[data-testid=graph-group][data-module='{expand}.0']")
            expanded = page.evaluate("performance.now()") - started
        return opened, expanded
    finally:
        page.close()


def time_download(browser, url: str) -> float:
    page = browser.new_page()
    try:
        page.goto(url.rsplit("/", 1)[0] + "/")
        return page.evaluate(
            "async u => { const t = performance.now(); await (await fetch(u)).arrayBuffer();"
            " return performance.now() - t; }",
            url,
        )
    finally:
        page.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=pathlib.Path, default=pathlib.Path("/tmp/pt2serve-bench"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from testing.graph_programs import stacked_archive

    gpt2 = ensure_archive(args.cache_dir)
    stack = args.cache_dir / "stack10k.pt2"
    if not stack.exists():
        with tempfile.TemporaryDirectory() as work:
            stacked_archive(stack, 25, 50, pathlib.Path(work))
    port, files_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PT2SERVE_REVALIDATE_SECONDS": "0"}
    env.pop("PT2SERVE_API_TOKEN", None)
    serve = [sys.executable, "-m", "app", "serve", "--port", str(port), "--log-level", "warning",
             f"gpt2={gpt2}", f"stack10k={stack}"]  # fmt: skip
    files = [sys.executable, "-m", "http.server", str(files_port), "--bind", "127.0.0.1",
             "--directory", str(gpt2.parent)]  # fmt: skip
    results: dict[str, list[float]] = {"gpt2": [], "stack10k": [], "expand": [], "download": []}
    with (
        process(serve, f"{base}/healthz", env),
        process(files, f"http://127.0.0.1:{files_port}/"),
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        # the first open of each: the service reads and parses the program (kept afterwards)
        cold = {name: time_graph(browser, base, name, None)[0] for name in ("gpt2", "stack10k")}
        for _ in range(args.repeat):
            results["gpt2"].append(time_graph(browser, base, "gpt2", None)[0])
            opened, expanded = time_graph(browser, base, "stack10k", "stages.3")
            results["stack10k"].append(opened)
            results["expand"].append(expanded or 0.0)
            results["download"].append(time_download(browser, f"http://127.0.0.1:{files_port}/{gpt2.name}"))
        browser.close()
    median = {key: statistics.median(values) for key, values in results.items()}
    size = gpt2.stat().st_size / 1e6
    download = median["download"]
    print(f"whole-archive download into the page (Netron's prerequisite), {size:.0f} MB: {download:.0f} ms")
    print(f"first opens (program read and parsed by the service): GPT-2 {cold['gpt2']:.0f} ms, "
          f"10,002 nodes {cold['stack10k']:.0f} ms")  # fmt: skip
    missed = 0
    for key, label in (("gpt2", "GPT-2 small graph tab"), ("stack10k", "10,002-node program, collapsed"),
                       ("expand", "expand a 50-block stage")):  # fmt: skip
        ok = median[key] < TARGETS[key]
        missed += not ok
        print(f"{label}: {median[key]:.0f} ms (target < {TARGETS[key]:.0f} ms): {'PASS' if ok else 'FAIL'}")
    print(f"download / GPT-2 graph tab: {median['download'] / median['gpt2']:.1f}x (first open: "
          f"{median['download'] / cold['gpt2']:.1f}x)")  # fmt: skip
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
