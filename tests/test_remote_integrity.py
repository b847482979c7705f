"""One flipped byte in a remote entry is an IntegrityError on every remote path, with the CRC-32
taken on a worker thread while the next bytes arrive (reader/entries/running_crc.py): a stream
never hands out the entry's last byte, `read`, `read_into` and `load` raise, and a bundle of the
service never completes its body (landing.py's checks without a server: test_landing_checks.py)."""

from __future__ import annotations

import pathlib
import struct
import zipfile

import httpx
import numpy as np
import pytest

import reader
from reader.sources import HttpOptions
from testing.faultserver import FaultServer
from testing.service import make_app, real_server
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator

SINGLE = HttpOptions(parallel_parts=1, max_attempts=2, backoff_base=0.01)
PARTS = HttpOptions(parallel_parts=4, part_size=1 << 20, parallel_above=1 << 20, fast_connection=None,
                    max_attempts=2, backoff_base=0.01)  # fmt: skip
BIG = 18 << 20  # several running_crc.BATCHes: the worker checks most of it


def _archive(path: pathlib.Path) -> dict[str, bytes]:
    rng = np.random.default_rng(34)
    tensors = {
        "first": rng.standard_normal(1 << 16, dtype=np.float32).tobytes(),
        "big": rng.standard_normal(BIG // 4, dtype=np.float32).tobytes(),
        "last": rng.standard_normal(3 << 18, dtype=np.float32).tobytes(),
    }
    write_pt2(path, {name: (7, [len(data) // 4], data) for name, data in tensors.items()})
    return tensors


def _flipped(path: pathlib.Path, at: int) -> bytes:
    """The archive with one bit flipped `at` bytes into the payload of "big" (negative: from its end)."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("weight_1"))
        assert info.file_size == BIG
        name_length, extra_length = struct.unpack_from("<HH", data, info.header_offset + 26)
        start = info.header_offset + 30 + name_length + extra_length
    data[start + (at % BIG)] ^= 0x10
    return bytes(data)


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, bytes]:
    path = tmp_path_factory.mktemp("integrity") / "clean.pt2"
    _archive(path)
    return {
        "clean": path.read_bytes(),
        "middle": _flipped(path, BIG // 2),
        "last byte": _flipped(path, -1),
        "first byte": _flipped(path, 0),
    }


@pytest.mark.parametrize("options", [SINGLE, PARTS], ids=["one connection", "parallel parts"])
@pytest.mark.parametrize("where", ["middle", "last byte", "first byte"])
async def test_a_stream_never_hands_out_the_last_byte_of_a_corrupt_entry(archives, where, options) -> None:
    async with FaultServer() as server:
        server.put("/a.pt2", archives[where])
        server.put("/clean.pt2", archives["clean"])
        async with reader.open_archive(server.url("/clean.pt2"), http_options=options) as clean:
            want = await clean.read("big")
            assert b"".join([bytes(c) async for c in clean.tensor("big").chunks(chunk_size=1 << 20)]) == want
        async with reader.open_archive(server.url("/a.pt2"), http_options=options) as ar:
            received = 0
            with pytest.raises(reader.IntegrityError, match="CRC-32"):
                async for chunk in ar.tensor("big").chunks(chunk_size=1 << 20):
                    received += len(chunk)
            assert received < BIG
            last = b"".join([bytes(chunk) async for chunk in ar.tensor("last").chunks()])
            assert last == await clean_bytes(archives, "last")
        assert not server.errors


async def clean_bytes(archives: dict[str, bytes], name: str) -> bytes:
    async with reader.open_archive(reader.sources.BytesSource(archives["clean"])) as ar:
        return await ar.read(name)


@pytest.mark.parametrize("options", [SINGLE, PARTS], ids=["one connection", "parallel parts"])
async def test_a_clean_entry_reads_into_a_buffer_whatever_order_its_parts_land_in(archives, options) -> None:
    want = await clean_bytes(archives, "big")
    async with FaultServer() as server:
        server.put("/clean.pt2", archives["clean"])
        async with reader.open_archive(server.url("/clean.pt2"), http_options=options) as ar:
            for _ in range(2):  # the first finds the data offset, the second goes straight in
                buffer = np.empty(BIG, dtype=np.uint8)
                await ar.tensor("big").read_into(buffer)
                assert buffer.tobytes() == want
        ranged = [record for record in server.log if record.method == "GET"]
        assert len(ranged) >= (6 if options is PARTS else 2)  # the parts of the second read


@pytest.mark.parametrize("options", [SINGLE, PARTS], ids=["one connection", "parallel parts"])
@pytest.mark.parametrize("where", ["middle", "last byte"])
async def test_read_read_into_and_load_refuse_a_corrupt_remote_entry(archives, where, options) -> None:
    async with FaultServer() as server:
        server.put("/a.pt2", archives[where])
        async with reader.open_archive(server.url("/a.pt2"), http_options=options) as ar:
            with pytest.raises(reader.IntegrityError, match="CRC-32"):
                await ar.read("big")
            for _ in range(2):  # the first finds the data offset, the second goes straight in
                with pytest.raises(reader.IntegrityError, match="CRC-32"):
                    await ar.tensor("big").read_into(np.empty(BIG, dtype=np.uint8))
            with pytest.raises(reader.IntegrityError, match="weight_1"):
                await ar.load()
            assert await ar.read("last") == await clean_bytes(archives, "last")


@pytest.mark.parametrize("route", ["safetensors", "ptd"])
async def test_a_bundle_of_a_corrupt_remote_archive_never_completes(archives, route) -> None:
    """The service sends the bundle as it reads it; the corrupt entry's last piece never goes out,
    so the client sees a body cut short, never a complete one (over a real uvicorn)."""
    async with FaultServer() as server:
        server.put("/clean.pt2", archives["clean"])
        for where in ("middle", "last byte"):
            server.put(f"/{where.replace(' ', '_')}.pt2", archives[where])
        specs = ["clean=" + server.url("/clean.pt2")]
        specs += [f"{n}={server.url(f'/{n}.pt2')}" for n in ("middle", "last_byte")]
        async with real_server(make_app(specs)) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
            good = await client.get(f"/archives/clean/{route}")
            assert good.status_code == 200 and len(good.content) == int(good.headers["content-length"])
            for name in ("middle", "last_byte"):
                got, length = 0, None
                with pytest.raises(httpx.RemoteProtocolError):
                    async with client.stream("GET", f"/archives/{name}/{route}") as response:
                        assert response.status_code == 200
                        length = int(response.headers["content-length"])
                        async for chunk in response.aiter_raw():
                            got += len(chunk)
                assert length is not None and got < length


FORKED = r"""
import asyncio, os
from reader import zipfmt
from reader.entries.running_crc import BATCH, RunningCrc

data = os.urandom(3 * BATCH)
entry = zipfmt.ZipEntry("x", b"x", 0, 0, zipfmt.crc32(data), len(data), len(data), 0, 0, "stored")

async def check():
    running = RunningCrc(entry)
    for at in range(0, len(data), BATCH // 2):
        running.add(data[at : at + BATCH // 2])
    await asyncio.wait_for(running.verify(), 30)  # a guard against a hang, not a timing

asyncio.run(check())  # the parent's workers exist now
child = os.fork()
if child == 0:
    try:
        asyncio.run(check())
    except BaseException:
        os._exit(1)
    os._exit(0)
print(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
"""


def test_a_forked_child_checks_with_workers_of_its_own() -> None:
    """The parent's worker threads do not exist in a forked child (reader.load forks safely)."""
    import os
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"]
