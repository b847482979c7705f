"""reader.load / Archive.load / reader.torch.load over the network: whole models as one read plan.

Every fixture and container loads to what per-tensor reads give over HTTP and from S3; faults during
a load are resumed, retried or refused (SourceChanged) with nothing returned; memory stays bounded.
The local loads and the synchronous calls are in test_load_rules.py."""

from __future__ import annotations

import asyncio
import os
import pathlib
import subprocess
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest

import reader
from reader.sources import HttpOptions, S3Settings
from testing import load_cases
from testing.faultserver import ChangeObject, DropAfter, FaultServer, StallAfter, Status
from testing.load_cases import CASE_IDS, CASES, PARALLEL, expect_reads
from testing.paths import ARCHIVES
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator


big_archive = load_cases.big_archive  # the fixture: six tensors, several parallel parts


@pytest.mark.parametrize(("path", "model"), CASES, ids=CASE_IDS)
async def test_http_load_equals_reads(path: pathlib.Path, model: str) -> None:
    async with FaultServer() as server:
        server.put("/a.pt2", path.read_bytes())
        async with reader.open_archive(server.url("/a.pt2"), tail_size=4096) as archive:
            arrays = await archive.load(model=model)
            data = archive.stats.get("data", {"requests": 0, "bytes": 0})
            assert data["requests"] <= 2  # a plan of a few ranges, not a read per tensor
            # each storage once: no more than the regions of the payload entries the model views
            with zipfile.ZipFile(path) as zipped:
                infos = {info.filename: info for info in zipped.infolist()}
            payloads = {t.storage.entry.split("!/")[0] for t in archive.tensors(model=model) if t.readable}
            regions = sum(infos[name].compress_size + 30 + len(name) + 256 for name in payloads)
            assert data["bytes"] <= regions + (1 << 20)  # and what lies between them (gaps < 1 MiB)
            assert all(array.flags.writeable for array in arrays.values())  # remote: owned memory
            await expect_reads(archive, model, arrays)
        assert not server.errors


def _s3_settings(seaweed) -> S3Settings:
    return S3Settings(
        region=seaweed.region,
        endpoint=seaweed.endpoint,
        access_key=seaweed.access_key,
        secret_key=seaweed.secret_key,
    )


async def test_s3_load_equals_reads(seaweed_s3) -> None:
    settings = _s3_settings(seaweed_s3)
    for path, model in CASES:
        key = f"load/{path.parent.name}/{path.name}"
        seaweed_s3.upload(seaweed_s3.private_bucket, key, path)
        location = f"s3://{seaweed_s3.private_bucket}/{key}"
        async with reader.open_archive(location, s3_settings=settings) as archive:
            await expect_reads(archive, model, await archive.load(model=model))
    path = ARCHIVES / "layouts.pt2"
    synchronous = reader.load(
        f"s3://{seaweed_s3.private_bucket}/load/archives/layouts.pt2", s3_settings=settings
    )
    assert {n: a.tobytes() for n, a in synchronous.items()} == {
        n: a.tobytes() for n, a in reader.load(path).items()
    }


async def _served_load(server: FaultServer, options: HttpOptions = PARALLEL) -> dict[str, np.ndarray]:
    async with reader.open_archive(server.url("/big.pt2"), http_options=options) as archive:
        return await archive.load()


async def test_load_uses_parallel_parts(big_archive) -> None:
    path, tensors = big_archive
    async with FaultServer() as server:
        server.put("/big.pt2", path.read_bytes())
        async with reader.open_archive(server.url("/big.pt2"), http_options=PARALLEL) as archive:
            arrays = await archive.load()
            assert archive.stats["data"]["bytes"] < path.stat().st_size  # every byte once, at most
        ranged = [r for r in server.requests("/big.pt2") if r.range and not r.range.startswith("bytes=-")]
    assert {n: a.tobytes() for n, a in arrays.items()} == tensors
    assert len(ranged) >= 8  # 9 MiB as 1 MiB parts


async def test_part_cut_mid_body_is_resumed(big_archive) -> None:
    path, tensors = big_archive
    async with FaultServer() as server:
        server.put("/big.pt2", path.read_bytes())
        server.faults.append(DropAfter(nbytes=300_000, after=3, method="GET"))
        arrays = await _served_load(server)
        assert server.faults[0].applied == 1
    assert {n: a.tobytes() for n, a in arrays.items()} == tensors


async def test_part_answering_5xx_is_retried(big_archive) -> None:
    path, tensors = big_archive
    async with FaultServer() as server:
        server.put("/big.pt2", path.read_bytes())
        server.faults.append(Status(503, times=2, after=2, method="GET"))
        arrays = await _served_load(server)
        assert server.faults[0].applied == 2
    assert {n: a.tobytes() for n, a in arrays.items()} == tensors


async def test_object_replaced_between_parts_raises_source_changed(big_archive) -> None:
    path, _ = big_archive
    data = path.read_bytes()
    async with FaultServer() as server:
        server.put("/big.pt2", data)
        server.faults.append(ChangeObject(data=data[::-1], after=3, method="GET"))
        result = None
        with pytest.raises(reader.SourceChanged):
            result = await _served_load(server)
        assert result is None


async def test_cancelled_load_leaves_no_connection_or_task(big_archive) -> None:
    path, _ = big_archive
    async with FaultServer() as server:
        server.put("/big.pt2", path.read_bytes())
        server.faults.append(StallAfter(nbytes=100_000, after=2, method="GET", times=None))
        before = asyncio.all_tasks()
        async with reader.open_archive(server.url("/big.pt2"), http_options=PARALLEL) as archive:
            load = asyncio.ensure_future(archive.load())
            for _ in range(200):
                await asyncio.sleep(0.01)
                if server.open_connections >= 2:
                    break
            load.cancel()
            with pytest.raises(asyncio.CancelledError):
                await load
        await asyncio.sleep(0.05)
        assert asyncio.all_tasks() - before == set()
        for _ in range(100):
            if server.open_connections == 0:
                break
            await asyncio.sleep(0.02)
        assert server.open_connections == 0


async def test_corrupt_payload_raises_integrity_error(tmp_path, big_archive) -> None:
    path, _ = big_archive
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("synthetic/data/weights/weight_2")
    data[info.header_offset + 200_000] ^= 0xFF  # inside its data (the header is < 200 bytes)
    corrupt = tmp_path / "corrupt.pt2"
    corrupt.write_bytes(bytes(data))
    with pytest.raises(reader.IntegrityError):
        reader.load(corrupt, verify=True)
    with pytest.raises(reader.IntegrityError):
        reader.load(corrupt, copy=True)
    async with FaultServer() as server:
        server.put("/big.pt2", bytes(data))
        with pytest.raises(reader.IntegrityError):
            await _served_load(server)


async def test_corrupt_entry_fails_the_load_while_the_body_still_runs(tmp_path, big_archive) -> None:
    """Entries are checked as they land: a corrupt first entry fails the load although the server
    stalls the rest of the body (checked only at the end, the load would wait on the stall)."""
    path, _ = big_archive
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("synthetic/data/weights/weight_0")
    data[info.header_offset + 200_000] ^= 0xFF
    one_stream = HttpOptions(parallel_parts=1, read_timeout=120, max_attempts=1)
    async with FaultServer() as server:
        server.put("/big.pt2", bytes(data))
        async with reader.open_archive(server.url("/big.pt2"), http_options=one_stream) as archive:
            server.faults.append(StallAfter(nbytes=4 << 20, method="GET", times=None))  # the load's GET
            with pytest.raises(reader.IntegrityError, match="weight_0"):
                await asyncio.wait_for(archive.load(), 60)  # a guard against a hang, not a timing
        assert server.faults[0].applied == 1


async def test_memory_is_output_plus_parts_in_flight(big_archive) -> None:
    """Peak allocations of a remote load (tracemalloc sees NumPy's buffers and every bytes
    object): the output plus parts in flight x part size, with a generous margin."""
    path, tensors = big_archive
    output = sum(map(len, tensors.values()))
    async with FaultServer() as server:
        server.put("/big.pt2", path.read_bytes())
        async with reader.open_archive(server.url("/big.pt2"), http_options=PARALLEL) as archive:
            tracemalloc.start()
            try:
                arrays = await archive.load()
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
    assert sum(a.nbytes for a in arrays.values()) == output
    in_flight = PARALLEL.parallel_parts * PARALLEL.part_size
    assert peak <= output + 2 * in_flight + (4 << 20), (peak, output)


async def test_a_remote_selection_keeps_no_unselected_payload_in_memory(tmp_path) -> None:
    """Storages are views of the range received; entries not selected between them are not kept."""
    rng = np.random.default_rng(28)
    tensors = {name: rng.standard_normal(2**16, dtype=np.float32).tobytes() for name in "abcd"}
    path = tmp_path / "four.pt2"
    write_pt2(path, {name: (7, [len(data) // 4], data) for name, data in tensors.items()})
    async with FaultServer() as server:
        server.put("/four.pt2", path.read_bytes())
        async with reader.open_archive(server.url("/four.pt2"), tail_size=4096) as archive:
            arrays = await archive.load(names=["a", "c", "d"])
    assert {name: array.tobytes() for name, array in arrays.items()} == {n: tensors[n] for n in "acd"}

    def root(array: np.ndarray) -> np.ndarray:
        while isinstance(array.base, np.ndarray):
            array = array.base
        return array

    held = {id(root(array)): root(array).nbytes for array in arrays.values()}
    assert sum(held.values()) < 3 * len(tensors["a"]) + (64 << 10)  # not b's 256 KiB
    assert np.shares_memory(root(arrays["c"]), arrays["d"])  # neighbours: one range, one buffer


FORKED_LOADS = """
import os, sys
import reader

path = sys.argv[1]
first = reader.load(path, copy=True)  # a copy: done on a thread, whose result wakes the loop
pid = os.fork()
if pid == 0:
    os._exit(0 if reader.load(path, copy=True).keys() == first.keys() else 1)
_, status = os.waitpid(pid, 0)
again = reader.load(path, copy=True)  # after the child's loop closed at its exit
print(os.waitstatus_to_exitcode(status), again.keys() == first.keys())
"""


def test_sync_loads_keep_working_across_fork(tmp_path) -> None:
    """reader.load keeps one event loop on the main thread between calls; a forked child makes its
    own and leaves the parent's alone (it shares the parent's epoll instance), so loads in both go
    on working."""
    script = tmp_path / "forked.py"
    script.write_text(FORKED_LOADS)
    done = subprocess.run(
        [sys.executable, str(script), str(ARCHIVES / "layouts.pt2")],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[1])},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "True"]
