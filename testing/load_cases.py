"""What the whole-archive load tests share: every fixture archive and container with readable weights
as (archive, model) cases, a multi-part archive served over HTTP in parallel parts, and the check
that loaded arrays equal the tensors' own reads."""

from __future__ import annotations

import asyncio
import pathlib

import numpy as np
import pytest

import reader
from reader.pt2.dtypes import BY_NAME
from reader.sources import HttpOptions
from testing.paths import ARCHIVES, CONTAINERS
from testing.paths import CONTAINER_VERSIONS as VERSIONS
from testing.zipbytes import write_pt2


def _cases() -> list[tuple[pathlib.Path, str]]:
    """(archive, model) for every fixture archive and container with readable weights."""
    cases = []
    paths = sorted(ARCHIVES.glob("*.pt2")) + [
        CONTAINERS / version / name
        for version in VERSIONS
        for name in ("checkpoint.pt", "aoti_pickle.pt2", "mixed.pt2")
    ]

    async def models(path: pathlib.Path) -> list[str]:
        try:
            async with reader.open_archive(path) as archive:
                return archive.models
        except reader.ReaderError:
            return []  # legacy layouts, AOTI without pickled weights: nothing to load

    for path in paths:
        cases += [(path, model) for model in asyncio.run(models(path))]
    return cases


CASES = _cases()


CASE_IDS = [f"{path.parent.name}/{path.name}:{model}" for path, model in CASES]


PART = 1 << 20


PARALLEL = HttpOptions(
    parallel_parts=4, part_size=PART, parallel_above=PART, fast_connection=None,
    backoff_base=0.01, backoff_cap=0.05, max_attempts=4,
)  # fmt: skip


@pytest.fixture(scope="module")
def big_archive(tmp_path_factory) -> tuple[pathlib.Path, dict[str, bytes]]:
    """Six tensors of 1.5 MiB (float32), one range of 9 MiB: several parallel parts."""
    rng = np.random.default_rng(7)
    tensors = {
        f"layer{i}.weight": rng.standard_normal(3 * 2**17, dtype=np.float32).tobytes() for i in range(6)
    }
    path = tmp_path_factory.mktemp("big") / "big.pt2"
    write_pt2(path, {name: (7, [len(data) // 4], data) for name, data in tensors.items()})
    return path, tensors


async def expect_reads(archive: reader.Archive, model: str, arrays: dict[str, np.ndarray]) -> None:
    """Each array equals the tensor's own read: dtype, shape and row-major bytes."""
    wanted = [t for t in archive.tensors(model=model) if t.readable]
    assert list(arrays) == [t.name for t in wanted]
    read = await archive.read_many([t.name for t in wanted], model=model, order="contiguous")
    for info in wanted:
        array = arrays[info.name]
        assert array.shape == tuple(info.sizes or ())
        if info.dtype == "complex32":
            assert np.array_equal(array, await archive.read_numpy(info.name, model=model))
            continue
        assert array.dtype == BY_NAME[info.dtype or ""].numpy
        assert np.ascontiguousarray(array).tobytes() == read[info.name], info.name
