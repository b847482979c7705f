"""The joining transport under uvicorn (app/protocol.py): a response's head and body leave in one
write, bytes keep their order, and nothing is held past the loop turn or a close."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

import reader
from app import protocol
from app.protocol import JoiningTransport
from testing.paths import ARCHIVES
from testing.service import make_app, real_server, threaded_server

pytestmark = pytest.mark.emulator


class Counted(asyncio.Protocol):
    """The peer end: what arrived, as it arrived."""

    def __init__(self) -> None:
        self.received = bytearray()

    def data_received(self, data: bytes) -> None:
        self.received += data


async def test_pipelined_requests_get_their_own_exact_answers_in_order() -> None:
    """Three requests in one packet on one connection (layout, a Range, a HEAD), then a 304: the
    joined writes must not mix the answers or their bytes."""
    async with reader.open_archive(ARCHIVES / "layouts.pt2") as ar:
        whole = await ar.read("conv.weight")
    async with real_server(make_app()) as url:
        host, port = url.removeprefix("http://").split(":")
        reader_stream, writer = await asyncio.open_connection(host, int(port))
        try:
            requests = (
                b"GET /tensors/conv.weight/layout HTTP/1.1\r\nHost: localhost\r\n\r\n"
                b"GET /tensors/conv.weight/data HTTP/1.1\r\nHost: localhost\r\nRange: bytes=4-11\r\n\r\n"
                b"HEAD /tensors/conv.weight/data HTTP/1.1\r\nHost: localhost\r\n\r\n"
            )
            writer.write(requests)
            answers = [await _response(reader_stream, head_only=index == 2) for index in range(3)]
            assert [status for status, _, _ in answers] == [200, 206, 200]
            assert answers[0][1]["content-type"] == "application/json"
            assert answers[1][2] == whole[4:12]
            assert answers[1][1]["content-range"] == f"bytes 4-11/{len(whole)}"
            assert answers[2][1]["content-length"] == str(len(whole)) and answers[2][2] == b""
            etag = answers[2][1]["etag"]
            writer.write(
                b"GET /tensors/conv.weight/data HTTP/1.1\r\nHost: localhost\r\n"
                + f"If-None-Match: {etag}\r\n\r\n".encode()
            )
            status, _, body = await _response(reader_stream, head_only=True)
            assert (status, body) == (304, b"")
        finally:
            writer.close()


async def _response(stream: asyncio.StreamReader, head_only: bool) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(stream.readuntil(b"\r\n\r\n"), 10)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    if head_only:
        return status, headers, b""
    return status, headers, await asyncio.wait_for(stream.readexactly(int(headers["content-length"])), 10)


class _WriteLog:
    """The socket transport under the joining one: records each call that reaches it."""

    def __init__(self, transport: asyncio.Transport, calls: list[tuple[str, int]]) -> None:
        self._transport = transport
        self._calls = calls

    def write(self, data: bytes) -> None:
        self._calls.append(("write", 1))
        self._transport.write(data)

    def writelines(self, pieces: list[bytes]) -> None:
        pieces = list(pieces)
        self._calls.append(("writelines", len(pieces)))
        self._transport.writelines(pieces)

    def __getattr__(self, name: str) -> object:
        return getattr(self._transport, name)


async def test_uvicorn_still_writes_responses_through_the_joining_transport() -> None:
    """The guard on uvicorn's internals (pyproject.toml bounds uvicorn by this test): the protocol
    swaps `self.transport` after `connection_made`, and every response must then leave through it.
    If a uvicorn release keeps its own reference (the cycle, a writer), the head and body go out
    in two writes again: silently slower, so this fails loudly instead."""
    import uvicorn
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from app.protocol import JoiningHttpToolsProtocol
    from testing.service import free_port

    calls: list[tuple[str, int]] = []

    class Logged(JoiningHttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            assert isinstance(self.transport, JoiningTransport), "uvicorn reassigned the transport"
            self.transport.transport = _WriteLog(transport, calls)  # type: ignore[assignment]

    assert issubclass(JoiningHttpToolsProtocol, HttpToolsProtocol)
    port = free_port()
    config = uvicorn.Config(make_app(), host="127.0.0.1", port=port, log_level="warning", loop="uvloop",
                            http=Logged, lifespan="on")  # fmt: skip
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        for _ in range(1000):
            if server.started:
                break
            await asyncio.sleep(0.01)
        reader_stream, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /tensors/conv.weight/layout HTTP/1.1\r\nHost: localhost\r\n\r\n")
        status, _, body = await _response(reader_stream, head_only=False)
        writer.close()
        assert status == 200 and body.startswith(b"{")
        assert calls == [("writelines", 2)], (
            f"uvicorn {uvicorn.__version__} no longer sends a response's head and body through "
            f"app.protocol.JoiningTransport (writes seen: {calls}); update app/protocol.py, then the "
            "uvicorn bound in pyproject.toml"
        )
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes `sock` within `within` seconds (what it sent before is dropped)."""
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def test_a_request_that_never_completes_is_closed(monkeypatch) -> None:
    """Slowloris: connections that send nothing, or trickle a head or a body, are closed once
    REQUEST_SECONDS pass (200 times shorter here than what the test waits); a request sent at once is
    answered."""
    monkeypatch.setattr(protocol, "REQUEST_SECONDS", 0.25)
    with threaded_server(make_app([f"layouts={ARCHIVES / 'layouts.pt2'}"])) as url:
        port = int(url.rpartition(":")[2])
        with socket.create_connection(("127.0.0.1", port)) as silent:
            assert _closed_by_server(silent, 50)
        with socket.create_connection(("127.0.0.1", port)) as trickling:
            trickling.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            for _ in range(3):
                time.sleep(0.1)
                trickling.sendall(b"X-A: b\r\n")
            assert _closed_by_server(trickling, 50)
        with socket.create_connection(("127.0.0.1", port)) as body:  # answered, then its body trickles
            body.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\nab")
            for _ in range(3):
                time.sleep(0.1)
                body.sendall(b"c")
            assert _closed_by_server(body, 50)
        with socket.create_connection(("127.0.0.1", port)) as served:
            served.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            served.settimeout(50)
            answer = b""
            while chunk := served.recv(65536):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 ")
