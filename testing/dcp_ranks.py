"""One rank of a torch.distributed.checkpoint load through `reader.torch.StorageReader`, for the tests
that run two of them on the gloo backend (tests/test_dcp_ranks.py).

    python -m testing.dcp_ranks --rank R --world 2 --port P --location s3://... --truth PATH --dim 0

Joins the process group (MASTER_ADDR 127.0.0.1, `--port`), makes a CPU DeviceMesh over every rank,
puts each tensor with more than `--dim` dims in the state dict as a zero DTensor placed
`Shard(dim)` (`distribute_tensor`, as FSDP2 places parameters on dim 0 and tensor parallelism on
dim 1) and every other tensor as a plain zero tensor, runs `dcp.load`, and prints one JSON line:
which local tensors differ from the truth's block (`--truth`: a local copy of the archive, read
with `reader.load`; the block is `full[start:stop]` along the dim as `reader.Shard.bounds` cuts it),
the bytes the rank holds (`share`), and what its reader read (`stats`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--location", required=True)
    parser.add_argument("--truth", required=True)
    parser.add_argument("--dim", type=int, default=0)
    parser.add_argument("--s3", default=None, help="S3Settings as JSON (region, endpoint, keys)")
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    import reader
    import reader.torch
    from reader.sources import S3Settings

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=args.rank, world_size=args.world)
    try:
        mesh = DeviceMesh("cpu", list(range(args.world)))
        truth = reader.load(args.truth)
        state: dict[str, torch.Tensor] = {}
        for name, array in truth.items():
            zeros = torch.zeros(array.shape, dtype=getattr(torch, array.dtype.name))
            sharded = array.ndim > args.dim
            state[name] = distribute_tensor(zeros, mesh, [Shard(args.dim)]) if sharded else zeros
        options = {"s3_settings": S3Settings(**json.loads(args.s3))} if args.s3 else {}
        storage_reader = reader.torch.StorageReader(args.location, **options)
        dcp.load(state, storage_reader=storage_reader)
        differ, share = [], 0
        for name, value in state.items():
            local = value.to_local() if isinstance(value, DTensor) else value
            want = truth[name]
            if isinstance(value, DTensor):
                start, stop = reader.Shard(args.rank, args.world).bounds(want.shape[args.dim])
                want = want[(slice(None),) * args.dim + (slice(start, stop),)]
            got = local.contiguous().flatten().view(torch.uint8).numpy().tobytes() if local.numel() else b""
            if tuple(local.shape) != want.shape or got != np.ascontiguousarray(want).tobytes():
                differ.append(name)
            share += local.numel() * local.element_size()
        whole = sum(array.nbytes for array in truth.values())
        print(json.dumps({"rank": args.rank, "differ": differ, "share": share, "whole": whole,
                          "stats": storage_reader.stats}))  # fmt: skip
        storage_reader.close()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
