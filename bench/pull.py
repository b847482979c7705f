"""`pull` on a GPT-2-small-sized archive: bytes an update moves vs a full re-download, and digest cost.

    python3 bench/pull.py [--cache-dir /tmp/pt2serve-bench] [--repeat 3]

Version 1 is bench/open_local.py's GPT-2 small archive (124.4M parameters, 498 MB, 149 tensors);
version 2 is the same model with two tensors changed (a "fine-tune": the last block's MLP output
weight and the final layer norm's bias), exported with torch and cached. A `pt2serve serve`
replica (a subprocess) serves the archive from a local path; the script pulls version 1 into a
mirror, deploys version 2 over it (a rename), waits for the replica to notice, and pulls again.
Baseline, same run: a full download of version 2 into an empty mirror.

Digest cost: the time to compute every tensor's SHA-256 through the reader (`Digests`, page cache
warm), in seconds per GB, against hashlib.sha256 over the same bytes already in memory.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import open_local  # noqa: E402 - the GPT-2 builder and its cached archive

import reader  # noqa: E402
from app.pull import pull  # noqa: E402
from reader.digests import Digests  # noqa: E402
from testing.seaweed import free_ports  # noqa: E402

FINETUNE_NAME = "gpt2_small_finetune.pt2"


def changed_names(names: list[str]) -> list[str]:
    last_block = max(int(n.split(".")[1]) for n in names if n.startswith("h."))
    return [f"h.{last_block}.mlp.c_proj.weight", "ln_f.bias"]


def ensure_finetune(cache_dir: pathlib.Path) -> tuple[pathlib.Path, list[str]]:
    """Version 2: open_local's model (same seed) with two tensors changed."""
    path = cache_dir / FINETUNE_NAME
    import torch

    torch.manual_seed(0)
    model = open_local.build_gpt2(torch).eval()
    state = model.state_dict()
    names = [n for n in changed_names(list(state)) if n in state]
    if len(names) != 2:
        raise SystemExit(f"expected two tensors to change, found {names} in {list(state)[:8]}...")
    if path.exists():
        return path, names
    print(f"generating {path} ...", flush=True)
    with torch.no_grad():
        for name in names:
            state[name].add_(0.01)
        exported = torch.export.export(model, (torch.zeros(1, 8, dtype=torch.long),))
    partial = path.with_suffix(f".tmp{os.getpid()}.pt2")
    torch.export.save(exported, str(partial))
    os.replace(partial, path)
    return path, names


def deploy(source: pathlib.Path, target: pathlib.Path) -> None:
    """Put `source` at `target` by a rename (a hard link: no copy), as a deploy does."""
    staging = target.with_name(target.name + ".new")
    staging.unlink(missing_ok=True)
    try:
        os.link(source, staging)
    except OSError:
        shutil.copy2(source, staging)
    os.replace(staging, target)


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def wait_for(url: str, predicate, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = get_json(url)
            if predicate(value):
                return value
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError(url)


async def digest_cost(path: pathlib.Path) -> tuple[float, float, int]:
    """(reader digests s/GB, hashlib-in-memory s/GB, bytes): every readable tensor, default order."""
    async with reader.open_archive(path) as archive:
        tensors = [t for t in archive.tensors() if t.readable]
        started = time.perf_counter()
        digests = Digests(archive)
        await digests.compute_ahead(tensors)
        ours = time.perf_counter() - started
        total = digests.bytes_hashed
        datas = [await archive.read(t.name, model=t.model) for t in tensors]
    started = time.perf_counter()
    for data in datas:
        hashlib.sha256(data).digest()
    baseline = time.perf_counter() - started
    return ours / (total / 1e9), baseline / (total / 1e9), total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cache-dir", type=pathlib.Path, default=pathlib.Path("/tmp/pt2serve-bench"))
    parser.add_argument("--repeat", type=int, default=3, help="digest cost: runs (median)")
    args = parser.parse_args(argv)
    v1 = open_local.ensure_archive(args.cache_dir)
    v2, names = ensure_finetune(args.cache_dir)
    work = pathlib.Path(tempfile.mkdtemp(prefix="pt2serve-pull-bench-"))
    served = work / "gpt2.pt2"
    deploy(v1, served)
    (port,) = free_ports(1)
    env = {**os.environ, "PT2SERVE_REVALIDATE_SECONDS": "0.5", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "app", "serve", "--port", str(port), "--log-level", "warning"]
    server = subprocess.Popen([*command, f"gpt2={served}"], env=env, cwd=work, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    url = f"{base}/archives/gpt2"
    try:
        first = wait_for(f"{base}/archives", lambda v: v["archives"][0].get("version"))["archives"][0]
        started = time.perf_counter()
        initial = asyncio.run(pull(url, work / "device"))
        initial_s = time.perf_counter() - started

        deploy(v2, served)
        wait_for(
            f"{base}/archives", lambda v: v["archives"][0].get("version") not in (None, first["version"])
        )
        started = time.perf_counter()
        update = asyncio.run(pull(url, work / "device"))
        update_s = time.perf_counter() - started

        started = time.perf_counter()
        fresh = asyncio.run(pull(url, work / "fresh-device"))  # baseline: a full re-download
        fresh_s = time.perf_counter() - started
    finally:
        server.terminate()
        server.wait(30)
    print(f"archive: {v1.name} -> {v2.name}, {update.tensors} tensors, changed: {', '.join(names)}")
    print("| pull | tensors fetched | bytes moved | seconds |")
    print("| --- | --- | --- | --- |")
    print(f"| first (version 1) | {initial.fetched} | {initial.bytes_fetched:,} | {initial_s:.2f} |")
    print(f"| update to version 2 | {update.fetched} | {update.bytes_fetched:,} | {update_s:.2f} |")
    print(f"| baseline: full download of v2 | {fresh.fetched} | {fresh.bytes_fetched:,} | {fresh_s:.2f} |")
    ratio = fresh.bytes_fetched / max(update.bytes_fetched, 1)
    share = update.bytes_fetched / fresh.bytes_fetched
    print(f"update moves {share:.4%} of a full download ({ratio:,.0f}x fewer bytes)")

    runs = [asyncio.run(digest_cost(v2)) for _ in range(args.repeat)]
    ours = sorted(r[0] for r in runs)[len(runs) // 2]
    base_s = sorted(r[1] for r in runs)[len(runs) // 2]
    print(f"digest cost over {runs[0][2] / 1e9:.2f} GB (median of {args.repeat}): reader {ours:.2f} s/GB, "
          f"hashlib in memory {base_s:.2f} s/GB, ratio {ours / base_s:.2f}x")  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
