"""Durable span markers: a span's bytes reach the disk (fdatasync) before its marker is renamed into
place, and the folder is flushed after, once per batch rather than per 8 MiB write; a fill killed
mid-way leaves no marker over bytes that were not written, and a reopen fetches the rest. Against
a real server (FaultServer), with a real SIGKILL of the process filling the cache."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap

import numpy as np
import pytest
import torch

import reader
from reader.cache import CacheStore, open_cached
from reader.cache.store import SYNC_BYTES
from reader.sources import HttpOptions, open_source
from testing.faultserver import FaultServer, StallAfter

pytestmark = pytest.mark.emulator

MiB = 1 << 20
ONE_STREAM = HttpOptions(parallel_parts=1, read_timeout=120.0)


def random_bytes(size: int, seed: int = 7) -> bytes:
    """Not zeros: a marker over a hole of the sparse file would read back as zeros."""
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def spans_of(version_path) -> list[tuple[int, int]]:
    return sorted(tuple(map(int, name.split("-"))) for name in os.listdir(version_path / "spans"))


async def test_bytes_are_flushed_before_their_marker_and_the_folder_after_in_batches(tmp_path, monkeypatch):
    blob = random_bytes(SYNC_BYTES + 40 * MiB)
    events: list[tuple[str, object]] = []
    for name in ("fdatasync", "fsync"):
        real = getattr(os, name)

        def wrapped(fd, real=real, name=name):  # counts and calls through: the real syncs run
            events.append((name, fd))
            return real(fd)

        monkeypatch.setattr(os, name, wrapped)
    real_pwritev, real_replace = os.pwritev, os.replace

    def pwritev(fd, buffers, offset, *flags):
        written = real_pwritev(fd, buffers, offset, *flags)
        events.append(("write", (offset, offset + written)))
        return written

    def replace(source, target, **options):
        real_replace(source, target, **options)
        if os.path.basename(os.path.dirname(target)) == "spans":
            events.append(("marker", tuple(map(int, os.path.basename(target).split("-")))))

    monkeypatch.setattr(os, "pwritev", pwritev)
    monkeypatch.setattr(os, "replace", replace)

    async with FaultServer() as server:
        server.put("/blob", blob)
        url = server.url("/blob")
        store = CacheStore(tmp_path)

        def open_remote(pinned):
            return open_source(url, tail_size=1024, http_options=ONE_STREAM, pinned=pinned)

        source = await open_cached(url, store, offline=False, open_remote=open_remote)
        try:
            events.clear()
            await source.fill([(0, len(blob))])
        finally:
            await source.close()

    writes = [e for e in events if e[0] == "write"]
    syncs = [e for e in events if e[0] == "fdatasync"]
    assert len(writes) >= (len(blob) - 1024) // (8 * MiB)  # written 8 MiB at a time ...
    assert 1 <= len(syncs) <= len(blob) // SYNC_BYTES + 1  # ... flushed once per batch
    for at, (kind, value) in enumerate(events):
        if kind != "marker":
            continue
        start, end = value
        before = events[:at]
        last_write = max(
            i for i, (k, span) in enumerate(before) if k == "write" and span[0] < end and span[1] > start
        )
        assert any(k == "fdatasync" for k, _ in before[last_write:]), f"marker {value} before its bytes' sync"
        assert any(k == "fsync" for k, _ in events[at:]), f"no folder sync after marker {value}"
    (version,) = store.list()
    with open(version.path / "data", "rb") as data:
        assert data.read() == blob


FILLER = textwrap.dedent(
    """
    import asyncio, sys
    import reader
    from reader.sources import HttpOptions

    async def main(url, cache_dir):
        options = HttpOptions(parallel_parts=1, read_timeout=600.0)
        async with reader.open_archive(url, cache_dir=cache_dir, http_options=options) as ar:
            print("opened", flush=True)
            sys.stdin.readline()
            await ar.load(copy=True)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_a_killed_fill_leaves_no_marker_over_unwritten_bytes(tmp_path):
    size = SYNC_BYTES + 48 * MiB
    weights = torch.frombuffer(bytearray(random_bytes(size)), dtype=torch.uint8)
    checkpoint = tmp_path / "big.pt"
    torch.save({"w": weights}, checkpoint)
    origin = checkpoint.read_bytes()
    cache_dir = tmp_path / "cache"
    stall_at = SYNC_BYTES + 32 * MiB  # past the first batch's sync: marked bytes and unmarked ones
    async with FaultServer() as server:
        server.put("/big.pt", origin)
        url = server.url("/big.pt")
        filler = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            FILLER,
            url,
            str(cache_dir),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        try:
            assert await asyncio.wait_for(filler.stdout.readline(), 120) == b"opened\n"
            stall = StallAfter(nbytes=stall_at, times=None, method="GET")
            server.faults.append(stall)  # the fill's GET sends `stall_at` bytes, then nothing
            filler.stdin.write(b"go\n")
            await filler.stdin.drain()
            (version,) = CacheStore(cache_dir).list()
            data = version.path / "data"
            for _ in range(1200):  # until the bytes before the stall are written (or 120 s)
                if stall.applied and os.stat(data).st_blocks * 512 >= stall_at - 8 * MiB:
                    break
                await asyncio.sleep(0.1)
            else:
                pytest.fail("the fill never reached the stall")
            filler.send_signal(signal.SIGKILL)
            await filler.wait()
        finally:
            if filler.returncode is None:
                filler.kill()
                await filler.wait()

        marked = spans_of(version.path)
        with open(data, "rb") as file:
            for start, end in marked:
                file.seek(start)
                assert file.read(end - start) == origin[start:end], f"marker {start}-{end} over wrong bytes"
        covered = sum(end - start for start, end in marked)
        assert covered < len(origin)  # killed before the end ...
        assert any(end - start >= SYNC_BYTES for start, end in marked)  # ... after a batch was marked
        assert os.stat(data).st_blocks * 512 > covered + 8 * MiB  # written bytes with no marker yet

        server.faults.clear()
        before = len(server.log)
        async with reader.open_archive(url, cache_dir=cache_dir, http_options=ONE_STREAM) as ar:
            arrays = await ar.load(copy=True)
        assert arrays["w"].tobytes() == weights.numpy().tobytes()
        refetched = [r.headers.get("range", "") for r in server.log[before:] if r.method == "GET"]
        first_gap = next(end for start, end in marked if end - start >= SYNC_BYTES)
        assert refetched and all(not r.startswith("bytes=0-") for r in refetched), refetched
        assert any(r.startswith(f"bytes={first_gap}-") for r in refetched), (refetched, marked)
