"""The test HTTP server itself: correct RFC 9110 ranges and preconditions, and each fault's exact symptom."""

from __future__ import annotations

import asyncio
import logging
import os
import time

import httpx
import pytest

from testing.faultserver import (
    ChangeObject,
    Chunked,
    Drip,
    DropAfter,
    FaultServer,
    Hang,
    IgnoreRange,
    NoContentLength,
    RefuseSuffix,
    ResetConnection,
    ShortBody,
    StallAfter,
    Status,
    WrongContentRange,
)

pytestmark = pytest.mark.emulator

N = 10_000
DATA = os.urandom(N)
PATH = "/obj.pt2"


@pytest.fixture
async def server(caplog):
    async with FaultServer() as srv:
        srv.put(PATH, DATA)
        yield srv
    assert srv.errors == []
    assert srv._tasks == set()
    assert [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR] == []


@pytest.fixture
async def client():
    async with httpx.AsyncClient(timeout=2.0) as c:
        yield c


def rng(value: str) -> dict[str, str]:
    return {"Range": value}


async def get(client: httpx.AsyncClient, server: FaultServer, range_: str | None = None, **headers: str):
    if range_ is not None:
        headers["Range"] = range_
    return await client.get(server.url(PATH), headers=headers)


# ------------------------------------------------------------------------------------------ normal


async def test_full_get_and_head(server, client) -> None:
    r = await get(client, server)
    assert r.status_code == 200
    assert r.content == DATA
    assert r.headers["content-length"] == str(N)
    assert r.headers["etag"] == server.etag(PATH)
    assert r.headers["accept-ranges"] == "bytes"
    assert "last-modified" in r.headers
    assert "content-range" not in r.headers
    h = await client.head(server.url(PATH), headers=rng("bytes=0-9"))  # HEAD ignores Range (RFC 9110 14.2)
    assert (h.status_code, h.content, h.headers["content-length"]) == (200, b"", str(N))
    assert server.log[-1].body_bytes == 0


@pytest.mark.parametrize(
    ("header", "first", "last"),
    [
        ("bytes=0-9", 0, 9),
        ("bytes=100-100", 100, 100),
        ("bytes=9990-", 9990, N - 1),
        ("bytes=0-", 0, N - 1),
        ("bytes=-7", N - 7, N - 1),
        ("bytes=-20000", 0, N - 1),  # suffix longer than the object: the whole object, still 206
        ("bytes=5000-999999", 5000, N - 1),  # end clipped
        ("Bytes = 1-2", 1, 2),
    ],
)
async def test_single_ranges(server, client, header, first, last) -> None:
    r = await get(client, server, header)
    assert r.status_code == 206
    assert r.content == DATA[first : last + 1]
    assert r.headers["content-range"] == f"bytes {first}-{last}/{N}"
    assert r.headers["content-length"] == str(last - first + 1)
    assert r.headers["etag"] == server.etag(PATH)
    assert r.headers["accept-ranges"] == "bytes"
    assert "last-modified" in r.headers
    assert server.log[-1].range == header and server.log[-1].body_bytes == last - first + 1


@pytest.mark.parametrize("header", [f"bytes={N}-", f"bytes={N + 5}-{N + 9}", "bytes=-0"])
async def test_unsatisfiable_is_416(server, client, header) -> None:
    r = await get(client, server, header)
    assert r.status_code == 416
    assert r.headers["content-range"] == f"bytes */{N}"
    assert r.content == b""


@pytest.mark.parametrize("header", ["bytes=0-1,5-6", "bytes=9-3", "items=0-5", "bytes=abc", "bytes=-"])
async def test_multiple_or_invalid_ranges_are_ignored(server, client, header) -> None:
    r = await get(client, server, header)
    assert (r.status_code, r.content) == (200, DATA)


async def test_unknown_path_method_and_empty_object(server, client) -> None:
    assert (await client.get(server.url("/nope"))).status_code == 404
    r = await client.post(server.url(PATH), content=b"x")
    assert (r.status_code, r.headers["allow"]) == (405, "GET, HEAD")
    server.put("empty", b"")
    assert (await client.get(server.url("/empty"), headers=rng("bytes=0-"))).status_code == 416
    r = await client.get(server.url("/empty"), headers=rng("bytes=-5"))
    assert (r.status_code, r.content) == (200, b"")


async def test_preconditions(server, client) -> None:
    etag = server.etag(PATH)
    assert (await get(client, server, "bytes=0-3", **{"If-Match": '"nope"'})).status_code == 412
    assert (await get(client, server, "bytes=0-3", **{"If-Match": f'"x", {etag}'})).status_code == 206
    assert (await get(client, server, "bytes=0-3", **{"If-Match": "*"})).status_code == 206
    assert (await get(client, server, "bytes=0-3", **{"If-Match": "W/" + etag})).status_code == 412
    r = await get(client, server, None, **{"If-None-Match": "W/" + etag})
    assert (r.status_code, r.content, r.headers["etag"]) == (304, b"", etag)
    r = await get(client, server, "bytes=0-3", **{"If-Range": '"old"'})
    assert (r.status_code, r.content) == (200, DATA)
    r = await get(client, server, "bytes=0-3", **{"If-Range": etag})
    assert (r.status_code, r.content) == (206, DATA[:4])
    lm = r.headers["last-modified"]
    assert (await get(client, server, "bytes=0-3", **{"If-Range": lm})).status_code == 206
    assert (await get(client, server, None, **{"If-Modified-Since": lm})).status_code == 304
    assert (await get(client, server, None, **{"If-Unmodified-Since": lm})).status_code == 200


async def test_put_replaces_etag_and_last_modified(server, client) -> None:
    old = (await get(client, server)).headers
    server.put(PATH, b"new bytes")
    r = await get(client, server, "bytes=0-2")
    assert r.content == b"new"
    assert r.headers["etag"] != old["etag"] and r.headers["last-modified"] != old["last-modified"]
    assert (await get(client, server, "bytes=0-2", **{"If-Match": old["etag"]})).status_code == 412
    server.put("tagged", b"x", etag="v1")
    assert server.etag("/tagged") == '"v1"'


async def test_keep_alive_and_connection_close(server, client) -> None:
    for _ in range(3):
        await get(client, server, "bytes=0-0")
    assert len({rec.connection for rec in server.log}) == 1
    r = await get(client, server, "bytes=0-0", Connection="close")
    assert r.headers["connection"] == "close"
    await get(client, server, "bytes=0-0")
    assert [rec.connection for rec in server.log[-2:]] == [1, 2]


# ------------------------------------------------------------------------------------------ faults


async def test_status_twice_then_normal(server, client) -> None:
    server.faults.append(Status(503, times=2, headers={"Retry-After": "1"}))
    codes = [(await get(client, server, "bytes=0-9")).status_code for _ in range(3)]
    assert codes == [503, 503, 206]
    assert server.log[0].response_headers["retry-after"] == "1"
    assert [rec.fault for rec in server.log] == ["Status", "Status", None]
    assert server.faults[0].applied == 2 and server.faults[0].exhausted


async def test_filters_path_method_after(server, client) -> None:
    server.put("other", b"o" * 10)
    server.faults += [Status(500, path="/other"), Status(429, method="HEAD"), Status(502, after=2, path=PATH)]
    assert (await client.get(server.url("other"))).status_code == 500
    assert (await client.head(server.url(PATH))).status_code == 429
    codes = [(await get(client, server)).status_code for _ in range(4)]
    # the HEAD above already counted towards after=2 (it matches path=PATH), so the 2nd GET gets the 502
    assert codes == [200, 502, 200, 200]


async def test_drop_after(server, client) -> None:
    server.faults.append(DropAfter(100))
    with pytest.raises(httpx.RemoteProtocolError):
        await get(client, server, "bytes=0-4999")
    assert (server.log[0].status, server.log[0].body_bytes) == (206, 100)
    assert (await get(client, server, "bytes=0-4999")).content == DATA[:5000]
    server.faults.append(DropAfter(10, rst=True))
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
        await get(client, server)
    assert (await get(client, server)).content == DATA


async def test_drop_after_streamed_body_gets_the_prefix(server, client) -> None:
    server.faults.append(DropAfter(3000))
    received = bytearray()
    async with client.stream("GET", server.url(PATH)) as r:
        assert r.headers["content-length"] == str(N)
        with pytest.raises(httpx.RemoteProtocolError):
            async for chunk in r.aiter_raw():
                received += chunk
    assert bytes(received) == DATA[:3000]


async def test_ignore_range(server, client) -> None:
    server.faults.append(IgnoreRange())
    await client.head(server.url(PATH))  # no Range: does not match, does not use the budget
    r = await get(client, server, "bytes=10-19")
    assert (r.status_code, r.content, "content-range" in r.headers) == (200, DATA, False)
    assert (await get(client, server, "bytes=10-19")).status_code == 206


async def test_wrong_content_range(server, client) -> None:
    server.faults.append(WrongContentRange(shift=3))
    r = await get(client, server, "bytes=10-19")
    assert r.status_code == 206
    assert r.headers["content-range"] == f"bytes 13-22/{N}" != f"bytes 10-19/{N}"
    assert r.content == DATA[13:23]
    server.faults.append(WrongContentRange(shift=0, total=N + 1))
    r = await get(client, server, "bytes=10-19")
    assert (r.headers["content-range"], r.content) == (f"bytes 10-19/{N + 1}", DATA[10:20])
    r = await get(client, server, "bytes=10-19")
    assert (r.headers["content-range"], r.content) == (f"bytes 10-19/{N}", DATA[10:20])


async def test_short_body(server, client) -> None:
    server.faults.append(ShortBody(missing=4))
    r = await get(client, server, "bytes=0-99")
    assert r.headers["content-range"] == f"bytes 0-99/{N}"
    assert r.headers["content-length"] == "96"
    assert r.content == DATA[:96]
    assert (await get(client, server, "bytes=0-99")).content == DATA[:100]
    assert len({rec.connection for rec in server.log}) == 1  # framing stayed valid


async def test_drip(server, client) -> None:
    server.faults.append(Drip(chunk_size=1000, interval=0.01))
    start = time.monotonic()
    r = await get(client, server, "bytes=0-4999")
    assert r.content == DATA[:5000]
    assert time.monotonic() - start >= 0.04
    assert server.faults[0].bytes_per_second == 100_000


@pytest.mark.parametrize("fault", [Chunked(chunk_size=999), NoContentLength()])
async def test_chunked_and_no_content_length(server, client, fault) -> None:
    server.faults.append(fault)
    r = await get(client, server, "bytes=1-8888")
    assert (r.status_code, r.content, r.headers["content-range"]) == (206, DATA[1:8889], f"bytes 1-8888/{N}")
    assert "content-length" not in r.headers
    if isinstance(fault, Chunked):
        assert r.headers["transfer-encoding"] == "chunked"
    else:
        assert r.headers["connection"] == "close" and "transfer-encoding" not in r.headers
    r = await get(client, server, "bytes=1-8888")
    assert r.headers["content-length"] == "8888"


async def test_change_object(server, client) -> None:
    old = server.etag(PATH)
    server.faults.append(ChangeObject(b"replaced!", after=1))
    assert (await get(client, server, "bytes=0-3")).headers["etag"] == old
    r = await get(client, server, "bytes=0-3")
    assert (r.content, r.headers["content-range"]) == (b"repl", "bytes 0-3/9")
    assert r.headers["etag"] == server.etag(PATH) != old
    assert (await get(client, server, "bytes=0-3", **{"If-Match": old})).status_code == 412


async def test_change_object_under_if_match(server, client) -> None:
    old = server.etag(PATH)
    server.faults.append(ChangeObject(b"replaced!"))
    assert (await get(client, server, "bytes=0-3", **{"If-Match": old})).status_code == 412


async def test_refuse_suffix(server, client) -> None:
    server.faults.append(RefuseSuffix(501))
    assert (await get(client, server, "bytes=0-9")).status_code == 206  # not a suffix: untouched
    assert (await get(client, server, "bytes=-10")).status_code == 501
    r = await get(client, server, "bytes=-10")
    assert (r.status_code, r.content) == (206, DATA[-10:])


async def test_hang_forever_then_normal(server, client) -> None:
    server.faults.append(Hang())
    with pytest.raises(httpx.ReadTimeout):
        await client.get(server.url(PATH), timeout=0.2)
    assert server.log[0].status is None
    assert (await get(client, server, "bytes=0-0")).content == DATA[:1]


async def test_hang_then_answer(server, client) -> None:
    server.faults.append(Hang(0.1))
    start = time.monotonic()
    assert (await get(client, server, "bytes=0-0")).content == DATA[:1]
    assert time.monotonic() - start >= 0.1


async def test_stall_after(server, client) -> None:
    server.faults.append(StallAfter(500))
    with pytest.raises(httpx.ReadTimeout):
        await client.get(server.url(PATH), timeout=0.2)
    server.faults.append(StallAfter(500, seconds=0.05))
    assert (await get(client, server)).content == DATA


async def test_reset_connection(server, client) -> None:
    server.faults.append(ResetConnection())
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
        await get(client, server)
    server.faults.append(ResetConnection(rst=False))
    with pytest.raises(httpx.RemoteProtocolError):
        await get(client, server)
    assert (await get(client, server)).content == DATA
    assert [rec.status for rec in server.log] == [None, None, 200]


async def test_delay(server, client) -> None:
    server.delay = 0.05
    start = time.monotonic()
    await get(client, server, "bytes=0-0")
    assert time.monotonic() - start >= 0.05


async def test_stop_closes_everything(caplog) -> None:
    server = FaultServer(objects={"a": b"abc"})
    await server.start()
    request = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
    idle_reader, idle_writer = await asyncio.open_connection(server.host, server.port)
    idle_writer.write(request)
    assert (await idle_reader.readuntil(b"abc")).startswith(b"HTTP/1.1 200 OK\r\n")  # then idle, kept alive
    server.faults.append(Hang())
    hung_reader, hung_writer = await asyncio.open_connection(server.host, server.port)
    hung_writer.write(request)
    while server.faults[0].applied == 0:
        await asyncio.sleep(0.01)
    assert len(server._tasks) == 2
    await server.stop()
    for reader, writer in [(idle_reader, idle_writer), (hung_reader, hung_writer)]:
        assert await reader.read() == b""  # the server closed it
        writer.close()
        await writer.wait_closed()
    assert server._tasks == set() and server._writers == set()
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert server.errors == []
    assert [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR] == []
    await server.stop()  # idempotent
