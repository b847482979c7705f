"""What the slice tests share: the fixtures with readable weights, their arrays read whole (locally, cached)
or from any location, fixed indices per shape, the check of one fixture's slices against NumPy, and an
embedding archive whose rows are read one by one."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools

import numpy as np
import pytest

import reader
from reader import zipfmt
from testing.paths import ARCHIVES
from testing.torch_oracle import EXPECTED
from testing.zipbytes import write_pt2

ROWS, COLS = 2048, 512  # 4 MiB of float32


FIXTURES = sorted(name for name, spec in EXPECTED.items() if "legacy_weights" not in spec)


async def whole_arrays(location, **options) -> dict[tuple[str, str], np.ndarray]:
    async with reader.open_archive(location, **options) as ar:
        return {
            (info.model, info.name): await ar.read_numpy(info.name, model=info.model)
            for info in ar.tensors()
            if info.readable
        }


@functools.cache
def local_arrays(name: str) -> dict[tuple[str, str], np.ndarray]:
    # on a thread of its own: async tests call this from inside their event loop
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, whole_arrays(ARCHIVES / name)).result()


def same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()


def fixed_indices(shape: tuple[int, ...]) -> list[object]:
    """A step, a negative index, an empty slice, an int, `...`, a reversed dim, np.newaxis."""
    if not shape:
        return [(), ..., (None,)]
    first = shape[0]
    indices: list[object] = [np.s_[::2], np.s_[1:0], ..., np.s_[::-1], (None, ...)]
    if first:
        indices += [-1, np.s_[..., -1] if shape[-1] else np.s_[..., :0], np.s_[-first:]]
    if len(shape) > 1:
        indices += [np.s_[:, 1::2], np.s_[1:, ::-2]]
    return indices


async def check_fixture(ar: reader.Archive, fixture: str, tensors: int | None = None) -> int:
    """The fixed slices of the fixture's first `tensors` tensors (all by default)."""
    checked = 0
    for (model, name), full in list(local_arrays(fixture).items())[:tensors]:
        for index in fixed_indices(full.shape):
            same(await ar.read_numpy(name, model=model, index=index), full[index])
            raw = await ar.read(name, model=model, index=index)
            if ar.layout(name, model=model).dtype != "complex32":  # read_numpy widens complex32
                assert raw == np.ascontiguousarray(full[index]).tobytes()
            checked += 1
    return checked


@pytest.fixture(scope="module")
def embedding(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slices")
    values = np.arange(ROWS * COLS, dtype=np.float32)
    write_pt2(folder / "emb.pt2", {"emb": (7, [ROWS, COLS], values.tobytes())}, tied={"emb_tied": "emb"})
    return folder / "emb.pt2", values.reshape(ROWS, COLS)


def header_guess(ar: reader.Archive, name: str) -> int:
    entry = ar._entries[ar.layout(name).storage.entry]
    return zipfmt.local_header_guess(entry)
