"""Open a GPT-2-small-sized .pt2 and list every tensor's layout: pt2serve vs zipfile+json vs torch.

    python3 bench/open_local.py [--cache-dir DIR] [--repeat N] [--torch-repeat N] [--strict]

The archive (~124M parameters, ~500 MB, lm_head tied to wte) is generated once
with torch.export and cached under --cache-dir. Every measurement is repeated
and the median is reported; untimed warm-up runs come first, so all three read a
warm page cache, and pt2serve and the zipfile baseline alternate run by run.

Targets: torch.export.load / pt2serve >= 200, pt2serve / zipfile baseline <= 1.5.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import statistics
import sys
import time
import zipfile
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import reader  # noqa: E402

ARCHIVE_NAME = "gpt2_small.pt2"
TORCH_OVER_PT2SERVE_MIN = 200.0
PT2SERVE_OVER_ZIPFILE_MAX = 1.5


# --------------------------------------------------------------------------- archive generation


def build_gpt2(torch):
    """A minimal GPT-2 small (HF layout names, nn.Linear instead of Conv1D), lm_head tied to wte."""
    nn = torch.nn
    functional = torch.nn.functional

    class Attention(nn.Module):
        def __init__(self, n_embd: int, n_head: int) -> None:
            super().__init__()
            self.n_head = n_head
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)

        def forward(self, x):
            batch, length, width = x.shape
            q, k, v = self.c_attn(x).split(width, dim=2)
            shape = (batch, length, self.n_head, width // self.n_head)
            q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
            y = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(batch, length, width))

    class MLP(nn.Module):
        def __init__(self, n_embd: int) -> None:
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.c_proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            return self.c_proj(functional.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self, n_embd: int, n_head: int) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd)
            self.attn = Attention(n_embd, n_head)
            self.ln_2 = nn.LayerNorm(n_embd)
            self.mlp = MLP(n_embd)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT2(nn.Module):
        def __init__(self, vocab: int = 50257, n_positions: int = 1024, n_embd: int = 768,
                     n_layer: int = 12, n_head: int = 12) -> None:  # fmt: skip
            super().__init__()
            self.wte = nn.Embedding(vocab, n_embd)
            self.wpe = nn.Embedding(n_positions, n_embd)
            self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
            self.ln_f = nn.LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)
            self.lm_head.weight = self.wte.weight  # tied: one Parameter, two names

        def forward(self, idx):
            positions = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(positions)
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return GPT2()


def ensure_archive(cache_dir: pathlib.Path) -> pathlib.Path:
    path = cache_dir / ARCHIVE_NAME
    if path.exists():
        return path
    import torch

    cache_dir.mkdir(parents=True, exist_ok=True)
    print(f"generating {path} (torch {torch.__version__}) ...", flush=True)
    started = time.perf_counter()
    torch.manual_seed(0)
    model = build_gpt2(torch).eval()
    params = sum(p.numel() for p in model.parameters())  # shared Parameter counted once
    with torch.no_grad():
        exported = torch.export.export(model, (torch.zeros(1, 8, dtype=torch.long),))
    partial = path.with_suffix(f".tmp{os.getpid()}.pt2")
    torch.export.save(exported, str(partial))
    os.replace(partial, path)
    print(f"  {params / 1e6:.1f}M parameters, {path.stat().st_size / 1e6:.0f} MB, "
          f"{time.perf_counter() - started:.1f} s", flush=True)  # fmt: skip
    return path


# --------------------------------------------------------------------------- the three contenders


async def _pt2serve_once(path: str) -> tuple[float, int]:
    started = time.perf_counter()
    async with reader.open_archive(path) as ar:
        layouts = [info.to_dict() for info in ar.tensors()]
    return time.perf_counter() - started, len(layouts)


def time_pt2serve(path: str) -> tuple[float, int]:
    """open + list every layout + close, timed inside a fresh event loop."""
    return asyncio.run(_pt2serve_once(path))


async def _pt2serve_warm_loop(path: str, repeat: int) -> list[tuple[float, int]]:
    return [await _pt2serve_once(path) for _ in range(repeat)]


def pt2serve_warm_loop(path: str, repeat: int) -> dict:
    """Informational, not a target: the same open+list+close, every run in one already-warm loop."""
    runs = asyncio.run(_pt2serve_warm_loop(path, repeat + 1))[1:]  # first run is the warm-up
    times = [elapsed for elapsed, _ in runs]
    return {"name": "pt2serve (one warm loop)", "median": statistics.median(times), "min": min(times),
            "max": max(times), "runs": repeat, "tensors": runs[-1][1]}  # fmt: skip


def list_with_zipfile(archive: zipfile.ZipFile) -> list[dict]:
    """The baseline: a torch-free listing of every tensor from the configs, with zipfile + json."""
    names = archive.namelist()
    root = names[0].split("/", 1)[0]
    prefix = f"{root}/models/"
    models = [name[len(prefix) : -len(".json")] for name in names
              if name.startswith(prefix) and name.endswith(".json")]  # fmt: skip
    present = set(names)
    tensors = []
    for model in models:
        for config in (f"{root}/data/weights/{model}_weights_config.json",
                       f"{root}/data/constants/{model}_constants_config.json"):  # fmt: skip
            if config not in present:
                continue
            for fqn, meta in json.loads(archive.read(config))["config"].items():
                tensor_meta = meta.get("tensor_meta") or {}
                tensors.append({
                    "name": fqn,
                    "model": model,
                    "dtype": tensor_meta.get("dtype"),
                    "sizes": [size.get("as_int") for size in tensor_meta.get("sizes", [])],
                })  # fmt: skip
    return tensors


def zipfile_listing(path: str) -> list[dict]:
    with zipfile.ZipFile(path) as archive:
        return list_with_zipfile(archive)


def time_zipfile(path: str) -> tuple[float, int]:
    started = time.perf_counter()
    tensors = zipfile_listing(path)
    return time.perf_counter() - started, len(tensors)


def time_torch(path: str) -> tuple[float, int]:
    import torch

    started = time.perf_counter()
    exported = torch.export.load(path)
    elapsed = time.perf_counter() - started
    return elapsed, len(exported.state_dict) + len(exported.constants)


# --------------------------------------------------------------------------- driver


def warm_page_cache(path: str) -> None:
    """Read the whole file once through one small buffer (no big allocations left behind)."""
    buffer = bytearray(1 << 20)
    with open(path, "rb", buffering=0) as handle:
        while handle.readinto(buffer):
            pass


def measure(name: str, run: Callable[[], tuple[float, int]], repeat: int, warmup: int = 2) -> dict:
    return measure_interleaved({name: run}, repeat, warmup)[0]


def measure_interleaved(
    contenders: dict[str, Callable[[], tuple[float, int]]], repeat: int, warmup: int = 2
) -> list[dict]:
    """Each round runs every contender once, in turn, so drifts in machine speed (this is a
    shared VM) hit all of them alike and the ratio of medians stays fair."""
    for _ in range(warmup):  # page cache, imports, first-use costs: not counted
        for run in contenders.values():
            run()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    counts: dict[str, int] = {}
    for _ in range(repeat):
        for name, run in contenders.items():
            elapsed, counts[name] = run()
            times[name].append(elapsed)
    return [{"name": name, "median": statistics.median(times[name]), "min": min(times[name]),
             "max": max(times[name]), "runs": repeat, "tensors": counts[name]}
            for name in contenders]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=pathlib.Path, default=pathlib.Path("/tmp/pt2serve-bench"))
    parser.add_argument("--repeat", type=int, default=11, help="runs of pt2serve and zipfile (default 11)")
    parser.add_argument("--torch-repeat", type=int, default=3, help="runs of torch.export.load (default 3)")
    parser.add_argument("--skip-torch", action="store_true", help="skip torch.export.load (no ratio)")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)

    path = str(ensure_archive(args.cache_dir))
    size = os.path.getsize(path)
    warm_page_cache(path)
    print(f"archive: {path} ({size / 1e6:.0f} MB); {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} (results are noisy if other work runs)")  # fmt: skip

    results = measure_interleaved(
        {
            "pt2serve open+list": lambda: time_pt2serve(path),
            "zipfile+json baseline": lambda: time_zipfile(path),
        },
        args.repeat,
    )
    warm = pt2serve_warm_loop(path, args.repeat)
    if not args.skip_torch:
        results.append(measure("torch.export.load", lambda: time_torch(path), args.torch_repeat))

    print(f"\n{'contender':<24}{'median ms':>12}{'min ms':>10}{'max ms':>10}{'runs':>6}{'tensors':>9}")
    for r in [*results, warm]:
        print(f"{r['name']:<24}{r['median'] * 1e3:>12.2f}{r['min'] * 1e3:>10.2f}"
              f"{r['max'] * 1e3:>10.2f}{r['runs']:>6}{r['tensors']:>9}")  # fmt: skip

    pt2serve, baseline = results[0]["median"], results[1]["median"]
    checks = [("pt2serve / zipfile baseline", pt2serve / baseline, "<=", PT2SERVE_OVER_ZIPFILE_MAX)]
    if not args.skip_torch:
        checks.insert(0, ("torch / pt2serve", results[2]["median"] / pt2serve, ">=", TORCH_OVER_PT2SERVE_MIN))
    print()
    failed = False
    for label, ratio, op, target in checks:
        ok = ratio >= target if op == ">=" else ratio <= target
        failed |= not ok
        print(f"{label:<30}{ratio:>10.2f}x   target {op} {target:g}x   {'PASS' if ok else 'FAIL'}")
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
