"""Tensor-parallel ranks without vLLM, for tests/test_vllm_ranks.py: each rank a process of its own
in a gloo process group on loopback, reading one archive together with the vLLM format's
`iter_shared_weights` (reader/integrations/vllm/ranks.py), as vLLM's workers do.

    python -m testing.tp_ranks --rank R --world N --port P --location URL --out R.json

OUT.json: every tensor it was handed, by name, as {"sha256", "dtype", "shape"}; or, when the
load failed, {"error": the exception's type, "message"}.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import pathlib
import subprocess
import sys
from collections.abc import Sequence

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _torch():
    import torch

    return torch


def describe(tensor) -> dict:
    """What the test compares of a tensor: its bytes' digest, dtype and shape."""
    raw = tensor.contiguous().reshape(-1).view(_torch().uint8).numpy().tobytes()
    return {
        "sha256": hashlib.sha256(raw).hexdigest(),
        "dtype": str(tensor.dtype),
        "shape": list(tensor.shape),
    }


async def run_ranks(location: str, world: int, port: int, out: pathlib.Path) -> list[dict]:
    """`world` rank processes loading `location` together; each one's OUT.json, by rank (asyncio,
    so a server in the caller's loop keeps serving)."""
    out.mkdir(parents=True, exist_ok=True)
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "testing.tp_ranks",
            "--rank",
            str(rank),
            "--world",
            str(world),
            "--port",
            str(port),
            "--location",
            location,
            "--out",
            str(out / f"{rank}.json"),
            cwd=str(ROOT),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for rank in range(world)
    ]
    outputs = await asyncio.wait_for(asyncio.gather(*(child.communicate() for child in children)), 300)
    for child, (output, _) in zip(children, outputs):
        if child.returncode != 0:
            raise RuntimeError(f"a rank exited with {child.returncode}:\n{output.decode()[-4000:]}")
    return [json.loads((out / f"{rank}.json").read_text()) for rank in range(world)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--location", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    import torch.distributed as dist

    from reader.integrations.vllm.ranks import RankGroup, iter_shared_weights

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank, world_size=args.world
    )
    group = RankGroup(dist.group.WORLD, list(range(args.world)), args.rank)
    try:
        tensors = {name: describe(tensor) for name, tensor in iter_shared_weights([args.location], group)}
        result: dict = {"tensors": tensors}
    except Exception as error:
        result = {"error": type(error).__name__, "message": str(error)}
    pathlib.Path(args.out).write_text(json.dumps(result))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
