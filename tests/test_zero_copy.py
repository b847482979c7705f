"""Zero-copy local serving (app/protocol.py's sendfile, reader.bodies.verified, reader.formats.runs), under a
real uvicorn on loopback with the protocol `pt2serve serve` runs: verified local bytes go out with
sendfile(2), every answer is byte-identical to the streamed path's, and a file rewritten in place or
an entry that fails its CRC is never sent unread. The library's own reads of such entries are in
test_zero_copy_rules.py."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
import zipfile
from collections.abc import AsyncIterator

import httpx
import pytest
import uvicorn

import reader
from app.protocol import HTTP_PROTOCOL, SENDFILE, JoiningHttpToolsProtocol
from reader.bodies.verified import is_verified
from reader.versions import source_version
from testing import big_payload
from testing.big_payload import BIG, payload_offset
from testing.paths import ARCHIVES
from testing.service import free_port, make_app
from testing.zipbytes import write_pt2

big_archive = big_payload.big_archive  # the fixture: the archive and its 8 MiB payload

pytestmark = pytest.mark.emulator


class StreamingProtocol(JoiningHttpToolsProtocol):
    """The same protocol without the zero-copy extension: every body goes through writes."""

    zero_copy = False


@contextlib.asynccontextmanager
async def serving(app, protocol=HTTP_PROTOCOL) -> AsyncIterator[str]:
    """The app under uvicorn (uvloop + httptools) on loopback in a thread, with `protocol`."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical", loop="uvloop",
                            http=protocol, lifespan="on")  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(1000):
        if server.started or not thread.is_alive():
            break
        await asyncio.sleep(0.01)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.to_thread(thread.join, 10)


async def checked_ahead(app) -> None:
    """Wait until every archive's background pass (digests, CRC-32 of each payload) is over."""
    for _ in range(5000):
        opened = [slot.current for slot in app.state.registry.slots.values() if slot.current is not None]
        if all(o.ahead is not None and o.ahead.done() for o in opened):
            return
        await asyncio.sleep(0.01)


async def test_a_verified_local_tensor_goes_out_with_sendfile(big_archive) -> None:
    path, payload = big_archive
    app = make_app([f"big={path}"])
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        await checked_ahead(app)
        before = SENDFILE.bytes
        whole = await client.get("/tensors/big/data")
        assert whole.status_code == 200 and whole.content == payload
        assert SENDFILE.bytes - before >= BIG - (64 << 10)  # all but the held tail went by sendfile
        ranged = await client.get("/tensors/big/data", headers={"Range": "bytes=100-5000000"})
        assert ranged.status_code == 206 and ranged.content == payload[100:5000001]
        before = SENDFILE.bytes
        parts = await client.get("/tensors/big/data", headers={"Range": "bytes=0-99999,4000000-4999999"})
        assert parts.status_code == 206 and payload[4000000:5000000] in parts.content
        assert SENDFILE.bytes - before >= 100000 + 1000000 - (64 << 10)
        before = SENDFILE.bytes
        bundle = await client.get("/archives/big/safetensors")
        assert bundle.status_code == 200 and payload in bundle.content
        assert SENDFILE.bytes - before >= BIG - (64 << 10)
        metrics = (await client.get("/metrics")).text
        sent = re.search(r"^pt2serve_sendfile_bytes_total (\S+)$", metrics, re.M)
        assert sent is not None and float(sent.group(1)) >= 2 * BIG + 4_000_000


async def test_an_executorch_program_goes_out_with_sendfile(big_archive) -> None:
    path, _ = big_archive
    program = os.urandom(3 << 20)
    with zipfile.ZipFile(path, "a") as archive:  # a stored program beside the weights
        archive.writestr(
            zipfile.ZipInfo("synthetic/data/executorch/model.pte", (2020, 1, 1, 0, 0, 0)), program
        )
    app = make_app([f"big={path}"])
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        await checked_ahead(app)
        before = SENDFILE.bytes
        whole = await client.get("/archives/big/executorch/model.pte")
        assert whole.status_code == 200 and whole.content == program
        ranged = await client.get("/archives/big/executorch/model.pte", headers={"Range": "bytes=5-2000000"})
        assert ranged.status_code == 206 and ranged.content == program[5:2000001]
        assert SENDFILE.bytes - before == len(program) + 1999996 - 2 * (64 << 10)  # all but each held tail


async def test_a_file_rewritten_in_place_is_never_sent(big_archive) -> None:
    path, payload = big_archive
    app = make_app([f"big={path}"])
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        await checked_ahead(app)
        archive = app.state.registry.slots["big"].archive
        assert is_verified(archive.tensor("big").fetcher, archive.tensor("big").entry)
        at = payload_offset(path, payload)
        before_stat = os.stat(path)
        with open(path, "r+b") as rewrite:  # same size, same inode, other bytes
            rewrite.seek(at + 1000)
            rewrite.write(bytes(b ^ 0xFF for b in payload[1000:2000]))
        if os.stat(path).st_mtime_ns == before_stat.st_mtime_ns:  # a coarse clock: make the change visible
            os.utime(path, ns=(before_stat.st_atime_ns, before_stat.st_mtime_ns + 1_000_000))
        before = SENDFILE.bytes
        answer = await client.get("/tensors/big/data")  # the change is seen before the head goes out:
        # the archive is reopened and the request answered again from the new version, whose bytes
        # fail the CRC-32 the directory still holds
        assert answer.status_code == 502 and answer.json()["error"]["code"] == "integrity_error"
        assert SENDFILE.bytes == before
        pinned = f"/archives/big@{archive_version(archive)}/tensors/big/data"
        gone = await client.get(pinned)  # a URL pinned to the version opened: gone, never its bytes
        assert gone.status_code == 410 and SENDFILE.bytes == before


async def test_a_rewrite_during_a_sendfile_never_completes_the_body(big_archive) -> None:
    path, payload = big_archive
    app = make_app([f"big={path}"])
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        await checked_ahead(app)
        at = payload_offset(path, payload)
        got = bytearray()
        with pytest.raises(httpx.HTTPError):  # a short body: the server closed before the last bytes
            async with client.stream("GET", "/tensors/big/data") as response:
                assert response.status_code == 200
                async for chunk in response.aiter_raw(1 << 20):
                    if not got:  # the head and the first bytes are out: rewrite the end in place
                        with open(path, "r+b") as rewrite:
                            rewrite.seek(at + BIG - 10)
                            rewrite.write(b"\0" * 10)
                    got += chunk
        assert len(got) < BIG and got == payload[: len(got)]  # never the rewritten bytes, never whole


async def test_an_entry_that_fails_its_crc_is_never_verified_nor_sent(tmp_path) -> None:
    path = tmp_path / "flipped.pt2"
    payload = os.urandom(BIG)
    write_pt2(path, {"big": (7, [BIG // 4], payload)})
    data = bytearray(path.read_bytes())
    data[payload_offset(path, payload) + 12345] ^= 0x01
    path.write_bytes(data)
    app = make_app([f"big={path}"])
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        await checked_ahead(app)
        archive = app.state.registry.slots["big"].archive
        assert not is_verified(archive.tensor("big").fetcher, archive.tensor("big").entry)
        before = SENDFILE.bytes
        answer = await client.get("/tensors/big/data")
        assert answer.status_code == 502 and answer.json()["error"]["code"] == "integrity_error"
        # the first failure verified nothing: a second ask is checked again
        again = await client.get("/tensors/big/data", headers={"Range": "bytes=0-"})
        assert again.status_code == 502 and again.json()["error"]["code"] == "integrity_error"
        assert SENDFILE.bytes == before


def archive_version(archive: reader.Archive) -> str:
    return source_version(archive.source)


FIXTURES = sorted(p for p in ARCHIVES.glob("*.pt2"))


TENSORS_EACH = 3  # tensors compared per fixture (each in three representations), besides its bundles


CHUNK = 512  # a small chunk size, so the fixtures' small bodies take the streamed (and sendfile) paths


def _requests(ar: reader.Archive, archive_id: str) -> list[tuple[str, str, dict[str, str]]]:
    """(method, path, headers) for the answers compared: whole, Range, multipart, HEAD, 304, If-Range."""
    paths = []
    readable = [info for info in ar.tensors() if info.readable and (info.nbytes or 0) > 0]
    for info in readable[:TENSORS_EACH]:
        base = f"/archives/{archive_id}/tensors/{info.name}/data?model={info.model}"
        paths += [base, base + "&order=contiguous", base + "&format=npy"]
    paths += [f"/archives/{archive_id}/safetensors", f"/archives/{archive_id}/ptd"]
    paths += [f"/archives/{archive_id}/executorch/{f.name}" for f in ar.executorch_files]
    asks = []
    for path in paths:
        asks += [
            ("GET", path, {}),
            ("HEAD", path, {}),
            ("GET", path, {"Range": "bytes=1-"}),
            ("GET", path, {"Range": "bytes=0-0,2-5,-3"}),
            ("GET", path, {"Range": "bytes=-100000"}),
        ]
    return asks


def _normalized(response: httpx.Response) -> tuple[int, list[tuple[str, str]], bytes]:
    """Status, headers and body, with the multipart boundary (random per response) and Date blanked."""
    content_type = response.headers.get("content-type", "")
    body = response.content
    boundary = re.search(r"boundary=(\w+)", content_type)
    if boundary:
        body = body.replace(boundary.group(1).encode(), b"BOUNDARY")
        content_type = content_type.replace(boundary.group(1), "BOUNDARY")
    headers = [(k, v) for k, v in response.headers.items() if k not in ("date", "content-type")]
    return response.status_code, sorted([*headers, ("content-type", content_type)]), body


async def test_every_fixture_answers_byte_identically_with_and_without_sendfile() -> None:
    specs = [f"{p.stem}={p}" for p in FIXTURES]
    fast, slow = make_app(specs, chunk_size=CHUNK), make_app(specs, chunk_size=CHUNK)
    async with (
        serving(fast) as fast_url,
        serving(slow, "tests.test_zero_copy:StreamingProtocol") as slow_url,
        httpx.AsyncClient(base_url=fast_url, timeout=60) as fast_client,
        httpx.AsyncClient(base_url=slow_url, timeout=60) as slow_client,
    ):
        await checked_ahead(fast)
        await checked_ahead(slow)
        before = SENDFILE.bytes
        compared = 0
        for fixture in FIXTURES:
            slot = fast.state.registry.slots[fixture.stem]
            if slot.archive is None:  # a fixture the service refuses: both refuse it alike
                continue
            for method, path, headers in _requests(slot.archive, fixture.stem):
                ours = await fast_client.request(method, path, headers=headers)
                theirs = await slow_client.request(method, path, headers=headers)
                assert _normalized(ours) == _normalized(theirs), (method, path, headers)
                if method == "GET" and not headers and ours.status_code == 200:
                    etag = ours.headers["etag"]
                    for extra in ({"If-None-Match": etag}, {"If-Range": etag, "Range": "bytes=3-9"},
                                  {"If-Range": '"other"', "Range": "bytes=3-9"}):  # fmt: skip
                        ours = await fast_client.get(path, headers=extra)
                        theirs = await slow_client.get(path, headers=extra)
                        assert _normalized(ours) == _normalized(theirs), (path, extra)
                compared += 1
        assert compared > 100
        assert SENDFILE.bytes > before  # the fast server did send files
