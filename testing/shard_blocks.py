"""A rank's block of a tensor as TGI cuts it, and four 1 MiB matrices to shard (as arrays, or written
to an archive), for the shard tests."""

from __future__ import annotations

import pathlib

import numpy as np

from testing.zipbytes import write_pt2


def block(array, rank: int, world: int, dim: int):
    """TGI's block: ceil(size / world) along `dim`, the last shorter, past the end empty."""
    size = array.shape[dim]
    step = -(-size // world)
    start = min(rank * step, size)
    index = [slice(None)] * array.ndim
    index[dim] = slice(start, min(start + step, size))
    return array[tuple(index)]


def matrix_arrays() -> dict[str, np.ndarray]:
    """Four 1 MiB float32 matrices (256 x 1024) and a small vector, always the same."""
    rng = np.random.default_rng(35)
    arrays = {f"layer{i}.weight": rng.standard_normal((256, 1024), dtype=np.float32) for i in range(4)}
    arrays["norm"] = rng.standard_normal(1024, dtype=np.float32)
    return arrays


def matrices(tmp_path: pathlib.Path) -> tuple[pathlib.Path, dict[str, np.ndarray]]:
    """Four 1 MiB float32 matrices (256 x 1024) and a small vector, in one archive."""
    arrays = matrix_arrays()
    path = tmp_path / "matrices.pt2"
    write_pt2(path, {name: (7, list(array.shape), array.tobytes()) for name, array in arrays.items()})
    return path, arrays
