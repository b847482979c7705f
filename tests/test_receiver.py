"""Long bodies received on a thread (reader/sources/transport/http1/receiver.py): the same bytes, errors,
timeouts, pooling and proxying as on the event loop, each full buffer's piece CRC-32s taken by the
receiving thread, told through `checked` and equal to the bytes' own (`RunningCrc` on its own:
test_crc_pieces.py)."""

from __future__ import annotations

import asyncio
import threading
import zlib

import httpx
import numpy as np
import pytest

import reader
from reader.sources import HttpOptions, HttpSource
from reader.sources.http import make_client
from reader.sources.transport.http1.connection import THREAD_MIN
from reader.sources.transport.http1.receiver import PIECE, Receiver
from testing.faultserver import DropAfter, FaultServer, ResetConnection, StallAfter
from testing.forward_proxy import ForwardProxy
from testing.private_ca import https_origin
from testing.service import in_process, make_app
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator

SIZE = 2 * THREAD_MIN + 12345
DATA = np.random.default_rng(7).integers(0, 256, SIZE, dtype=np.uint8).tobytes()


def _receiving() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "pt2serve-receive"]


async def _quiet() -> None:
    """Every receiving thread has ended (within 10 s: a loaded CI host schedules threads late)."""
    for _ in range(1000):
        if not _receiving():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{len(_receiving())} receiving threads still running")


Told = list[tuple[int, int, int]]  # what `checked` heard: (offset, length, CRC-32)


async def _get(
    client: httpx.AsyncClient, url: str, start: int, end: int, told: Told | None = None
) -> list[bytes | memoryview]:
    async with client.stream("GET", url, headers={"Range": f"bytes={start}-{end - 1}"}) as response:
        assert response.status_code == 206
        if told is not None:
            response.body.checked = lambda at, nbytes, crc: told.append((start + at, nbytes, crc))
        return [chunk async for chunk in response.aiter_raw()]


def _told_right(told: Told) -> None:
    """Every CRC-32 told is the CRC-32 of those bytes of DATA."""
    assert all(zlib.crc32(DATA[at : at + nbytes]) == crc for at, nbytes, crc in told)


async def _released(server: FaultServer) -> None:
    for _ in range(1000):
        if not server.open_connections:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{server.open_connections} connections still open")


async def test_a_long_body_is_received_on_a_thread_exact_with_each_buffers_crc() -> None:
    async with FaultServer() as server, make_client(HttpOptions()) as client:
        server.put("/blob", DATA)
        told: Told = []
        chunks = await _get(client, server.url("/blob"), 100, SIZE - 7, told)
        assert b"".join(chunks) == DATA[100 : SIZE - 7]
        assert sum(nbytes for _, nbytes, _ in told) >= SIZE - THREAD_MIN - PIECE  # the thread's share
        _told_right(told)
        kept = bytes(chunks[-1])
        assert b"".join(await _get(client, server.url("/blob"), 0, SIZE)) == DATA
        assert bytes(chunks[-1]) == kept  # a later body never reuses an earlier one's buffers
        assert [record.connection for record in server.log] == [1, 1]  # read to its end: kept
        await _quiet()


async def test_receive_thread_off_keeps_a_long_body_on_the_event_loop() -> None:
    """The service's setting (it relays each chunk): the same bytes, no thread, no buffer CRCs."""
    async with FaultServer() as server, make_client(HttpOptions(receive_thread=False)) as client:
        server.put("/blob", DATA)
        told: Told = []
        chunks = await _get(client, server.url("/blob"), 100, SIZE - 7, told)
        assert b"".join(chunks) == DATA[100 : SIZE - 7]
        assert told == []
        assert not _receiving()
        assert [record.connection for record in server.log] == [1]


@pytest.mark.parametrize("service", [True, False], ids=["service", "library"])
async def test_the_service_relays_a_long_remote_body_received_on_the_event_loop(
    tmp_path, monkeypatch, service: bool
) -> None:
    """The service writes each chunk to its client as it comes: it receives on the loop (a thread
    per long body cost that relay a quarter of its speed, bench/serve_remote.py); the library's
    stream of the same range goes to a thread. The bytes are exact either way."""
    started: list[Receiver] = []
    start = Receiver.start
    monkeypatch.setattr(Receiver, "start", lambda receiver: (started.append(receiver), start(receiver)))
    data = DATA[: SIZE // 4 * 4]
    write_pt2(tmp_path / "a.pt2", {"w": (7, [len(data) // 4], data)})
    async with FaultServer() as server:
        server.put("/a.pt2", (tmp_path / "a.pt2").read_bytes())
        url = server.url("/a.pt2")
        if service:
            async with in_process(make_app([f"r={url}"], parallel_parts=1)) as client:
                response = await client.get("/archives/r/tensors/w/data")
                assert response.status_code == 200 and response.content == data
        else:
            async with reader.open_archive(url, http_options=HttpOptions(parallel_parts=1)) as ar:
                assert b"".join([bytes(c) async for c in ar.tensor("w").chunks()]) == data
    assert bool(started) is not service
    await _quiet()


async def test_a_consumer_that_stops_early_ends_the_thread_and_the_connection() -> None:
    async with FaultServer() as server, make_client(HttpOptions()) as client:
        server.put("/blob", DATA)
        async with client.stream("GET", server.url("/blob"), headers={"Range": f"bytes=0-{SIZE - 1}"}) as r:
            async for chunk in r.aiter_raw():
                assert bytes(chunk) == DATA[: len(chunk)]
                break
        await _quiet()
        await _released(server)  # closed abortively: the server is not left writing to it
        assert b"".join(await _get(client, server.url("/blob"), 0, SIZE)) == DATA
        assert [record.connection for record in server.log] == [1, 2]  # the first was not reused


@pytest.mark.parametrize("rst", [False, True], ids=["FIN", "RST"])
async def test_a_body_cut_short_hands_on_what_arrived_then_fails(rst: bool) -> None:
    async with FaultServer() as server, make_client(HttpOptions()) as client:
        server.put("/blob", DATA)
        cut = THREAD_MIN + (5 << 20) + 3
        server.faults.append(DropAfter(cut, rst=rst))
        got = bytearray()
        headers = {"Range": f"bytes=0-{SIZE - 1}"}
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            async with client.stream("GET", server.url("/blob"), headers=headers) as r:
                async for chunk in r.aiter_raw():
                    got += chunk
        assert got == DATA[: len(got)] and len(got) <= cut
        if not rst:  # a FIN: every byte sent was read, the part-filled buffer included
            assert len(got) == cut
        await _released(server)
        await _quiet()


async def test_a_stalled_body_times_out_and_its_thread_ends() -> None:
    async with FaultServer() as server, make_client(HttpOptions(read_timeout=0.3)) as client:
        server.put("/blob", DATA)
        server.faults.append(StallAfter(THREAD_MIN + 1000))
        with pytest.raises(httpx.ReadTimeout):
            await _get(client, server.url("/blob"), 0, SIZE)
        await _quiet()


async def test_a_body_that_stalls_mid_buffer_hands_on_what_arrived_before_the_timeout() -> None:
    """The thread fills 4 MiB buffers, but bytes that wait for more are handed on as they come (the
    service sends its first chunk before its headers: it must not wait for a buffer to fill)."""
    stall = THREAD_MIN + (1 << 20) + 777
    async with FaultServer() as server, make_client(HttpOptions(read_timeout=1.0)) as client:
        server.put("/blob", DATA)
        server.faults.append(StallAfter(stall))
        got = bytearray()
        headers = {"Range": f"bytes=0-{SIZE - 1}"}
        with pytest.raises(httpx.ReadTimeout):
            async with client.stream("GET", server.url("/blob"), headers=headers) as r:
                async for chunk in r.aiter_raw():
                    got += chunk
        assert got == DATA[:stall]  # every byte sent, none held back in a part-filled buffer
        await _quiet()


async def test_a_pooled_connection_reset_after_a_threaded_body_is_replaced() -> None:
    async with FaultServer() as server, make_client(HttpOptions()) as client:
        server.put("/blob", DATA)
        assert b"".join(await _get(client, server.url("/blob"), 0, SIZE)) == DATA
        server.faults.append(ResetConnection(times=1))
        assert b"".join(await _get(client, server.url("/blob"), 9, SIZE)) == DATA[9:]
        assert [(r.connection, r.fault) for r in server.log] == [(1, None), (1, "ResetConnection"), (2, None)]
        await _quiet()


async def test_bytes_past_the_content_length_never_reach_the_next_response() -> None:
    """The thread reads exactly the body; a byte past it makes the pooled connection unusable."""
    body = DATA[:SIZE]
    answered = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            answered.append(1)
            head = f"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-{len(body) - 1}/{SIZE}\r\n"
            writer.write((head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body + b"EXTRA")
            await writer.drain()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with make_client(HttpOptions()) as client:
            for _ in range(2):
                chunks = await _get(client, f"http://127.0.0.1:{port}/blob", 0, len(body))
                assert b"".join(chunks) == body
        assert len(answered) == 2
    finally:
        server.close()
    await _quiet()


@pytest.fixture(scope="module")
def origin(tmp_path_factory):
    """nginx over http and https (a private CA's certificate) serving DATA."""
    with https_origin(tmp_path_factory.mktemp("receiver"), {"blob.bin": DATA}) as (ca, server):
        yield ca, server


async def _source_chunks(url: str, options: HttpOptions) -> tuple[list[bytes | memoryview], Told]:
    """The source's stream of DATA[3:], and the CRC-32s it told of (checked right: asserted)."""
    source = await HttpSource.open(url, options=options)
    told: Told = []
    try:
        chunks = [
            chunk
            async for chunk in source.stream(
                3, SIZE, checked=lambda at, nbytes, crc: told.append((at, nbytes, crc))
            )
        ]
    finally:
        await source.close()
    _told_right(told)
    return chunks, told


async def test_a_plain_http_proxy_carries_a_threaded_body(origin, monkeypatch) -> None:
    _, server = origin
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    async with ForwardProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        chunks, told = await _source_chunks(server.base_url + "/blob.bin", HttpOptions(parallel_parts=1))
    assert b"".join(chunks) == DATA[3:]
    assert told  # the thread's buffers
    assert proxy.log and all(entry["method"] == "GET" for entry in proxy.log)  # through the proxy
    await _quiet()


async def test_a_tls_body_stays_on_the_event_loop(origin) -> None:
    """TLS state lives in asyncio's SSL protocol: such a body is not handed to a thread."""
    ca, server = origin
    options = HttpOptions(parallel_parts=1, ca_bundle=str(ca.ca_file))
    chunks, told = await _source_chunks(server.tls_base_url + "/blob.bin", options)
    assert b"".join(chunks) == DATA[3:]
    assert told == []


def test_under_uvloop_as_the_service_runs_tls_stays_and_plain_tcp_is_handed_over(origin) -> None:
    """The service's loop is uvloop: its TLS transports must be told apart the same way."""
    uvloop = pytest.importorskip("uvloop")
    ca, server = origin

    async def both() -> tuple[list, list]:
        tls = HttpOptions(parallel_parts=1, ca_bundle=str(ca.ca_file))
        secure = await _source_chunks(server.tls_base_url + "/blob.bin", tls)
        plain = await _source_chunks(server.base_url + "/blob.bin", HttpOptions(parallel_parts=1))
        return secure, plain

    (secure, told_secure), (plain, told_plain) = uvloop.run(both())
    assert b"".join(secure) == DATA[3:] == b"".join(plain)
    assert told_secure == []
    assert told_plain
