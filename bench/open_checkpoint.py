"""Open a GPT-2-small-sized torch.save checkpoint and list every tensor: pt2serve vs torch vs safetensors.

    python3 bench/open_checkpoint.py [--cache-dir DIR] [--repeat N] [--delay 0.03]

The checkpoint is a state dict with GPT-2 small's shapes (HF names, lm_head tied to wte,
~124M float32 parameters, ~500 MB) filled with random numbers (no download), written once
by torch.save and once as .safetensors (lm_head dropped: safetensors refuses shared storage),
and cached under --cache-dir. Local contenders, interleaved run by run on a warm page cache:

  pt2serve      reader.open_archive(path) + [t.to_dict() for t in ar.tensors()]
  torch         torch.load(path, weights_only=True, mmap=True) + (name, dtype, shape) per tensor
  safetensors   safetensors.safe_open(path, "numpy") + (name, dtype, shape) per tensor

Then the checkpoint over HTTP (tests' FaultServer in its own process, --delay seconds per
request): requests and bytes pt2serve needs to open it and list it, from the server's log.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import statistics
import sys
import time
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import reader  # noqa: E402
from testing.servers import FaultServerProcess  # noqa: E402

CHECKPOINT = "gpt2_small_state_dict.pt"
SAFETENSORS = "gpt2_small_state_dict.safetensors"


def gpt2_state_dict(torch) -> dict:
    """GPT-2 small's state dict shapes (transformers' GPT2LMHeadModel names), random values."""
    generator = torch.Generator().manual_seed(0)

    def rand(*shape: int):
        return torch.randn(*shape, generator=generator) * 0.02

    n_embd, layers = 768, 12
    state = {"transformer.wte.weight": rand(50257, n_embd), "transformer.wpe.weight": rand(1024, n_embd)}
    for layer in range(layers):
        prefix = f"transformer.h.{layer}."
        shapes = {
            "ln_1.weight": (n_embd,), "ln_1.bias": (n_embd,),
            "attn.c_attn.weight": (n_embd, 3 * n_embd), "attn.c_attn.bias": (3 * n_embd,),
            "attn.c_proj.weight": (n_embd, n_embd), "attn.c_proj.bias": (n_embd,),
            "ln_2.weight": (n_embd,), "ln_2.bias": (n_embd,),
            "mlp.c_fc.weight": (n_embd, 4 * n_embd), "mlp.c_fc.bias": (4 * n_embd,),
            "mlp.c_proj.weight": (4 * n_embd, n_embd), "mlp.c_proj.bias": (n_embd,),
        }  # fmt: skip
        state.update({prefix + name: rand(*shape) for name, shape in shapes.items()})
    state["transformer.ln_f.weight"] = rand(n_embd)
    state["transformer.ln_f.bias"] = rand(n_embd)
    state["lm_head.weight"] = state["transformer.wte.weight"]  # tied
    return state


def ensure_files(cache_dir: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    checkpoint, safetensors_path = cache_dir / CHECKPOINT, cache_dir / SAFETENSORS
    if checkpoint.exists() and safetensors_path.exists():
        return checkpoint, safetensors_path
    import torch
    from safetensors.torch import save_file

    cache_dir.mkdir(parents=True, exist_ok=True)
    state = gpt2_state_dict(torch)
    torch.save(state, checkpoint)
    save_file({k: v for k, v in state.items() if k != "lm_head.weight"}, safetensors_path)
    return checkpoint, safetensors_path


# --------------------------------------------------------------------------- contenders


async def _pt2serve(location: str) -> int:
    async with reader.open_archive(location) as ar:
        return len([info.to_dict() for info in ar.tensors()])


def run_pt2serve(path: str) -> int:
    return asyncio.run(_pt2serve(path))


def run_torch(path: str) -> int:
    import torch

    state = torch.load(path, weights_only=True, mmap=True)
    return len([(name, value.dtype, tuple(value.shape)) for name, value in state.items()])


def run_safetensors(path: str) -> int:
    from safetensors import safe_open

    with safe_open(path, framework="numpy") as handle:
        slices = [handle.get_slice(name) for name in handle.keys()]  # noqa: SIM118 - safe_open is no dict
        return len([(s.get_dtype(), s.get_shape()) for s in slices])


def measure_interleaved(contenders: dict[str, Callable[[], int]], repeat: int, warmup: int = 2) -> dict:
    for _ in range(warmup):
        for run in contenders.values():
            run()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    counts = {}
    for _ in range(repeat):
        for name, run in contenders.items():
            started = time.perf_counter()
            counts[name] = run()
            times[name].append(time.perf_counter() - started)
    return {name: (statistics.median(values), min(values), counts[name]) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache-dir", type=pathlib.Path, default=pathlib.Path("/tmp/pt2serve-bench"))
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--delay", type=float, default=0.03)
    args = parser.parse_args(argv)
    checkpoint, safetensors_path = ensure_files(args.cache_dir)
    size = checkpoint.stat().st_size
    print(f"checkpoint: {checkpoint} ({size / 1e6:.0f} MB); safetensors: {safetensors_path}")
    results = measure_interleaved(
        {
            "pt2serve": lambda: run_pt2serve(str(checkpoint)),
            "torch.load(mmap)": lambda: run_torch(str(checkpoint)),
            "safetensors": lambda: run_safetensors(str(safetensors_path)),
        },
        args.repeat,
    )
    print(f"\n{'local open + list':<22}{'median ms':>12}{'min ms':>10}{'tensors':>9}")
    for name, (median, low, count) in results.items():
        print(f"{name:<22}{median * 1e3:>12.2f}{low * 1e3:>10.2f}{count:>9}")
    ours = results["pt2serve"][0]
    print(f"\ntorch.load(weights_only, mmap) / pt2serve: {results['torch.load(mmap)'][0] / ours:.1f}x")
    print(f"safetensors.safe_open / pt2serve:         {results['safetensors'][0] / ours:.2f}x")

    with FaultServerProcess(checkpoint, delay=args.delay) as server:
        asyncio.run(_pt2serve(server.url))  # warm-up: imports, TLS/HTTP client set-up
        server.take_log()
        times, logs = [], []
        for _ in range(args.repeat):
            started = time.perf_counter()
            count = asyncio.run(_pt2serve(server.url))
            times.append(time.perf_counter() - started)
            logs.append(server.take_log())
    requests = statistics.median(len(log) for log in logs)
    fetched = statistics.median(sum(entry["bytes"] for entry in log) for log in logs)
    print(f"\nover HTTP ({args.delay * 1e3:.0f} ms per request), a fresh client per open, median of "
          f"{args.repeat}: {count} entries listed in {statistics.median(times) * 1e3:.0f} ms, "
          f"{requests:.0f} requests, {fetched:.0f} bytes ({fetched / size:.4%} of the file)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
