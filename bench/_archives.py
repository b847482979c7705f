"""Archives the benchmarks generate once with torch and cache: one big float32 tensor named "big"."""

from __future__ import annotations

import os
import pathlib
import tempfile
import time

TENSOR = "big"


def ensure_single_tensor_archive(
    cache_dir: pathlib.Path, filename: str, elements: int, *, fill: str = "zeros"
) -> pathlib.Path:
    """cache_dir/filename holding one float32 buffer "big" of `elements` (zeros or arange)."""
    path = cache_dir / filename
    if path.exists():
        return path
    import torch

    values = torch.zeros(elements) if fill == "zeros" else torch.arange(elements, dtype=torch.float32)

    class Big(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer(TENSOR, values)

        def forward(self, x):
            return x + self.big[: x.shape[0]]

    cache_dir.mkdir(parents=True, exist_ok=True)
    print(f"generating {path} (torch {torch.__version__}) ...", flush=True)
    started = time.perf_counter()
    exported = torch.export.export(Big(), (torch.zeros(4),))
    # save under the final file name (torch names the archive's root folder after it), then move
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        partial = pathlib.Path(tmp, filename)
        torch.export.save(exported, str(partial))
        os.replace(partial, path)
    print(f"  {path.stat().st_size / 2**20:.0f} MiB, {time.perf_counter() - started:.1f} s", flush=True)
    return path
