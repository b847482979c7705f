"""iter_load over HTTP: tensors handed over while the body still runs, parallel parts hand over final
arrays, a corrupt storage never handed over (the rest of iter_load: test_iter_load.py)."""

from __future__ import annotations

import asyncio
import contextlib
import zipfile

import pytest

import reader
from reader.sources import HttpOptions
from testing.faultserver import FaultServer, StallAfter
from testing.load_cases import PARALLEL, big_archive  # noqa: F401 - the fixture

pytestmark = pytest.mark.emulator


ONE_STREAM = HttpOptions(parallel_parts=1, read_timeout=120, max_attempts=1)


async def test_tensors_are_handed_over_while_the_body_still_runs(big_archive) -> None:  # noqa: F811
    """One connection; the server stalls the load's body after 4 MiB: the tensors in those bytes
    (1.5 MiB each) come out of the loop although the rest never arrives."""
    path, tensors = big_archive
    async with FaultServer() as server:
        server.put("/big.pt2", path.read_bytes())
        before = asyncio.all_tasks()
        async with reader.open_archive(server.url("/big.pt2"), http_options=ONE_STREAM) as archive:
            server.faults.append(StallAfter(nbytes=4 << 20, method="GET", times=None))
            async with contextlib.aclosing(archive.iter_load()) as landing:
                first = [
                    await asyncio.wait_for(anext(landing), 60) for _ in range(2)
                ]  # a guard, not a timing
        assert server.faults[0].applied == 1
        assert [name for name, _ in first] == ["layer0.weight", "layer1.weight"]
        for name, array in first:
            assert array.tobytes() == tensors[name]
        await asyncio.sleep(0.05)
        assert asyncio.all_tasks() - before == set()  # leaving the loop cancelled the reads


async def test_parallel_parts_hand_over_final_arrays(big_archive) -> None:  # noqa: F811
    """Parts land in any order; what was handed over is never written again."""
    path, tensors = big_archive
    async with FaultServer() as server:
        server.put("/big.pt2", path.read_bytes())
        async with reader.open_archive(server.url("/big.pt2"), http_options=PARALLEL) as archive:
            seen = {}
            landed = {}
            async for name, array in archive.iter_load():
                seen[name] = array.tobytes()  # what it held when handed over
                landed[name] = array
            assert archive.stats["data"]["bytes"] < path.stat().st_size  # the same plan: each byte once
    assert seen == tensors
    assert {name: array.tobytes() for name, array in landed.items()} == tensors


async def test_a_corrupt_storage_is_never_handed_over(tmp_path, big_archive) -> None:  # noqa: F811
    path, _ = big_archive
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("synthetic/data/weights/weight_2")
    data[info.header_offset + 200_000] ^= 0xFF
    async with FaultServer() as server:
        server.put("/big.pt2", bytes(data))
        async with reader.open_archive(server.url("/big.pt2"), http_options=ONE_STREAM) as archive:
            names = []
            with pytest.raises(reader.IntegrityError, match="weight_2"):
                async for name, _ in archive.iter_load():
                    names.append(name)
    assert "layer2.weight" not in names
    assert set(names) <= {"layer0.weight", "layer1.weight"}  # what lies before it, if checked first
