"""The HTTP/1.1 client under httpx (reader/sources/transport/http1/): exact bytes handed on as received, the
connection released however the consumer ends, httpx's error types for every misbehaviour; every
request kind the sources send (HEAD, a body, bodiless answers, chunked answers) over the same pool.
(tests/test_http_source.py runs every fault through it too.)"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from reader.sources import HttpOptions
from reader.sources.http import make_client
from testing.faultserver import Drip, DropAfter, FaultServer, ResetConnection, StallAfter

pytestmark = pytest.mark.emulator

BULK_MIN = 1 << 20  # a receive buffer

SIZE = 3 * BULK_MIN + 12345
DATA = bytes(range(256)) * (SIZE // 256) + bytes(SIZE % 256)


async def _get(client: httpx.AsyncClient, url: str, start: int, end: int) -> list[bytes | memoryview]:
    async with client.stream("GET", url, headers={"Range": f"bytes={start}-{end - 1}"}) as response:
        assert response.status_code == 206
        assert response.headers["content-range"] == f"bytes {start}-{end - 1}/{SIZE}"
        return [chunk async for chunk in response.aiter_raw()]


async def _released(server: FaultServer) -> None:
    for _ in range(200):
        if not server.open_connections:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{server.open_connections} connections still open")


async def test_a_big_range_arrives_exact_in_buffers_of_its_own() -> None:
    async with FaultServer() as server:
        server.put("/blob", DATA)
        async with make_client(HttpOptions()) as client:
            chunks = await _get(client, server.url("/blob"), 100, SIZE - 7)
            assert b"".join(chunks) == DATA[100 : SIZE - 7]
            assert all(isinstance(chunk, memoryview) for chunk in chunks)  # the bulk path, no copies
            kept = bytes(chunks[0])
            assert b"".join(await _get(client, server.url("/blob"), 0, SIZE)) == DATA
            assert bytes(chunks[0]) == kept  # a later body never reuses an earlier one's buffers
            assert [record.connection for record in server.log] == [1, 1]  # read to its end: kept
            small = await _get(client, server.url("/blob"), 0, 1000)  # the same path, however short
            assert b"".join(small) == DATA[:1000] and isinstance(small[0], memoryview)
            assert [record.connection for record in server.log] == [1, 1, 1]
        await _released(server)  # closing the client closes the pooled connections


async def test_a_pooled_connection_the_server_dropped_is_replaced() -> None:
    async with FaultServer() as server, make_client(HttpOptions()) as client:
        server.put("/blob", DATA)
        await _get(client, server.url("/blob"), 0, SIZE)
        server.faults.append(ResetConnection(times=1))  # the kept connection dies at the next request
        assert b"".join(await _get(client, server.url("/blob"), 5, SIZE)) == DATA[5:]
        assert [(r.connection, r.fault) for r in server.log] == [(1, None), (1, "ResetConnection"), (2, None)]


async def test_a_consumer_that_stops_early_releases_the_connection() -> None:
    async with FaultServer() as server, make_client(HttpOptions()) as client:
        server.put("/blob", DATA)
        async with client.stream(
            "GET", server.url("/blob"), headers={"Range": f"bytes=0-{SIZE - 1}"}
        ) as response:
            async for chunk in response.aiter_raw():
                assert bytes(chunk) == DATA[: len(chunk)]
                break
        await _released(server)
        assert not [task for task in asyncio.all_tasks() if "http1" in repr(task.get_coro())]


@pytest.mark.parametrize("rst", [False, True], ids=["FIN", "RST"])
async def test_a_body_cut_short_hands_on_what_arrived_then_fails(rst: bool) -> None:
    async with FaultServer() as server, make_client(HttpOptions()) as client:
        server.put("/blob", DATA)
        server.faults.append(DropAfter(BULK_MIN + 5, rst=rst))
        received = bytearray()
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            async with client.stream(
                "GET", server.url("/blob"), headers={"Range": f"bytes=0-{SIZE - 1}"}
            ) as r:
                async for chunk in r.aiter_raw():
                    received += chunk
        assert received == DATA[: len(received)] and len(received) <= BULK_MIN + 5
        await _released(server)


async def test_a_stalled_body_times_out() -> None:
    options = HttpOptions(read_timeout=0.3)
    async with FaultServer() as server, make_client(options) as client:
        server.put("/blob", DATA)
        server.faults.append(StallAfter(1000))
        with pytest.raises(httpx.ReadTimeout):
            await _get(client, server.url("/blob"), 0, SIZE)


async def test_a_slow_body_is_handed_on_as_it_comes() -> None:
    """Reads of a body wait for a MiB of it to be queued (SO_RCVLOWAT), but a body slower than that
    is read as it comes: here 1 MiB at 16 KiB per 20 ms (1.3 s), with a 0.4 s read timeout, which
    waiting for the whole MiB would overrun."""
    options = HttpOptions(read_timeout=0.4)
    async with FaultServer() as server, make_client(options) as client:
        server.put("/blob", DATA)
        server.faults.append(Drip(chunk_size=16 << 10, interval=0.02))
        chunks = await _get(client, server.url("/blob"), 0, BULK_MIN)
        assert b"".join(chunks) == DATA[:BULK_MIN]
        assert len(chunks) >= 10  # in pieces as they came, not all at the end


async def test_a_refused_connection_is_a_connect_error() -> None:
    async with FaultServer() as server:
        url = server.url("/blob")
    async with make_client(HttpOptions(connect_timeout=2.0)) as client:  # the server is gone
        with pytest.raises(httpx.ConnectError):
            await _get(client, url, 0, SIZE)


async def test_bytes_past_the_content_length_are_not_handed_on() -> None:
    """A server that sends more than it announced: the body ends at its Content-Length."""
    body = DATA[:BULK_MIN]

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = f"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-{len(body) - 1}/{SIZE}\r\n"
        writer.write((head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body + b"NOT PART OF IT")
        await writer.drain()
        await asyncio.sleep(0.5)
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with make_client(HttpOptions()) as client:
            chunks = await _get(client, f"http://127.0.0.1:{port}/blob", 0, len(body))
        assert b"".join(chunks) == body
    finally:
        server.close()


async def test_a_consumer_that_lags_gets_fewer_bigger_chunks() -> None:
    """Reads that land one after another in a buffer wait as one run: a consumer that comes late
    takes at most a chunk per 1 MiB buffer, not one per socket read."""
    async with FaultServer() as server, make_client(HttpOptions()) as client:
        server.put("/blob", DATA)
        server.faults.append(Drip(chunk_size=64 << 10, interval=0.0005))  # ~50 socket reads
        async with client.stream("GET", server.url("/blob"), headers={"Range": f"bytes=0-{SIZE - 1}"}) as r:
            await asyncio.sleep(0.5)  # everything arrives meanwhile (3 MiB: below the read-ahead)
            chunks = [bytes(chunk) async for chunk in r.aiter_raw()]
        assert b"".join(chunks) == DATA
        assert len(chunks) <= SIZE // (BULK_MIN - (64 << 10)) + 2


async def _receive(client: httpx.AsyncClient, url: str, buffer: memoryview) -> list[int]:
    """The whole object received into `buffer` (the response's `body`); what each wake added."""
    async with client.stream("GET", url, headers={"Range": f"bytes=0-{len(buffer) - 1}"}) as response:
        return [nbytes async for nbytes in response.body.receive_into(buffer)]


async def test_a_body_received_into_the_callers_memory_is_exact_and_keeps_its_connection() -> None:
    async with FaultServer() as server, make_client(HttpOptions()) as client:
        server.put("/blob", DATA)
        buffer = bytearray(SIZE)
        landed = await _receive(client, server.url("/blob"), memoryview(buffer))
        assert buffer == DATA and sum(landed) == SIZE
        assert b"".join(await _get(client, server.url("/blob"), 0, SIZE)) == DATA
        assert [record.connection for record in server.log] == [1, 1]  # its end released it to the pool
        assert buffer == DATA  # the next body on that connection did not write into it


@pytest.mark.parametrize("rst", [False, True], ids=["FIN", "RST"])
async def test_a_body_cut_short_counts_what_landed_then_fails(rst: bool) -> None:
    async with FaultServer() as server, make_client(HttpOptions()) as client:
        server.put("/blob", DATA)
        server.faults.append(DropAfter(BULK_MIN + 5, rst=rst))
        buffer, landed = bytearray(SIZE), []
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            async with client.stream(
                "GET", server.url("/blob"), headers={"Range": f"bytes=0-{SIZE - 1}"}
            ) as response:
                async for nbytes in response.body.receive_into(memoryview(buffer)):
                    landed.append(nbytes)
        assert sum(landed) <= BULK_MIN + 5 and buffer[: sum(landed)] == DATA[: sum(landed)]
        if not rst:  # a FIN: every byte sent was read
            assert sum(landed) == BULK_MIN + 5
        await _released(server)


async def test_a_stalled_body_into_memory_times_out() -> None:
    async with FaultServer() as server, make_client(HttpOptions(read_timeout=0.3)) as client:
        server.put("/blob", DATA)
        server.faults.append(StallAfter(BULK_MIN // 2))
        with pytest.raises(httpx.ReadTimeout):
            await _receive(client, server.url("/blob"), memoryview(bytearray(SIZE)))


async def _scripted(answers: list[bytes], seen: list[bytes]):
    """A server that answers each request on a connection with the next of `answers` (raw bytes)
    and records each request (head and body) in `seen`; returns the server and its port."""
    connections = [0]

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections[0] += 1
        try:
            while answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                seen.append(head + await reader.readexactly(length))
                writer.write(answers.pop(0))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], connections


async def test_head_bodiless_answers_and_a_request_body_share_one_kept_connection() -> None:
    """A HEAD's Content-Length, a 204 and a 304 carry no body (the next answer on the connection is
    read right); a POST's body goes out exact; all over one kept connection."""
    answers = [
        b'HTTP/1.1 200 OK\r\nContent-Length: 12345\r\nETag: "a"\r\n\r\n',
        b"HTTP/1.1 204 No Content\r\nContent-Length: 99\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 12345\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    ]
    seen: list[bytes] = []
    server, port, connections = await _scripted(answers, seen)
    url = f"http://127.0.0.1:{port}/x"
    try:
        async with make_client(HttpOptions(read_timeout=5.0)) as client:
            head = await client.head(url)
            assert head.status_code == 200 and head.headers["content-length"] == "12345"
            assert (await client.get(url)).status_code == 204
            assert (await client.get(url, headers={"If-None-Match": '"a"'})).status_code == 304
            posted = await client.post(url, content=b"payload \x00\xff")
            assert posted.content == b"hello"
    finally:
        server.close()
    assert seen[0].startswith(b"HEAD /x ") and seen[3].startswith(b"POST /x ")
    assert seen[3].endswith(b"\r\n\r\npayload \x00\xff")
    assert connections[0] == 1


async def test_a_chunked_answer_is_exact_and_its_connection_not_kept() -> None:
    answers = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ]
    seen: list[bytes] = []
    server, port, connections = await _scripted(answers, seen)
    try:
        async with make_client(HttpOptions(read_timeout=5.0)) as client:
            assert (await client.get(f"http://127.0.0.1:{port}/a")).content == b"hello world"
            assert (await client.get(f"http://127.0.0.1:{port}/b")).content == b"ok"
    finally:
        server.close()
    assert connections[0] == 2  # a body framed by chunks: its connection closed after it
