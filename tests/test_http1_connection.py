"""The asyncio side of an HTTP/1.1 connection (reader/sources/transport/http1/connection.py) around
its sans-IO core, driven through the protocol's own callbacks on a stand-in transport (no socket):
flow control,
when a waiting consumer is woken, what stops the connection, and errors raised to the consumer."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from reader.sources.transport.http1.connection import READ_AHEAD, WAKE_AT, Connection
from reader.sources.transport.http1.stream import BodyStream

pytestmark = pytest.mark.unit


class Transport(asyncio.Transport):
    """What the protocol asked of its transport (no socket behind it: no read mark, no thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.paused = False
        self.state = "open"

    def write(self, data: bytes) -> None:
        self.written += data

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return self.state != "open"

    def close(self) -> None:
        self.state = "closed"

    def abort(self) -> None:
        self.state = "aborted"

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default


def _connect() -> tuple[Connection, Transport]:
    connection, transport = Connection(asyncio.get_running_loop()), Transport()
    connection.connection_made(transport)
    connection.send_request(httpx.Request("GET", "http://example/blob"))
    return connection, transport


def _read(connection: Connection, data: bytes) -> None:
    """`data` as the socket's reads would land it."""
    while data:
        buffer = connection.get_buffer(-1)
        nbytes = min(len(buffer), len(data))
        buffer[:nbytes] = data[:nbytes]
        connection.buffer_updated(nbytes)
        data = data[nbytes:]


def _head(length: int) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % length


async def test_the_request_is_written_and_the_head_wakes_its_waiter() -> None:
    connection, transport = _connect()
    assert transport.written.startswith(b"GET /blob HTTP/1.1\r\n")
    waiting = asyncio.ensure_future(connection.wait_head(5))
    await asyncio.sleep(0)
    _read(connection, _head(3) + b"abc")
    head = await waiting
    assert head.status_code == 200 and connection.framing.done and connection.framing.reusable
    assert bytes(connection.take().data) == b"abc" and connection.take() is None


async def test_the_socket_stops_being_read_while_read_ahead_bytes_wait_and_resumes_at_half() -> None:
    connection, transport = _connect()
    size = READ_AHEAD + (1 << 20)
    _read(connection, _head(size) + bytes(READ_AHEAD))
    assert transport.paused and connection.inbox.held == READ_AHEAD
    taken = 0
    while transport.paused:
        taken += len(connection.take().data)
    assert READ_AHEAD // 2 <= taken < READ_AHEAD // 2 + (1 << 20)  # resumed once half was taken


async def test_a_waiting_consumer_is_woken_once_enough_of_the_body_waits_not_at_every_read() -> None:
    connection, _ = _connect()
    _read(connection, _head(1 << 20))
    waiting = asyncio.ensure_future(connection.wait(5))
    await asyncio.sleep(0)
    _read(connection, bytes(1000))
    assert not waiting.done() and connection.wake_timer is not None  # a little: more may join it
    _read(connection, bytes(WAKE_AT))
    await asyncio.sleep(0)
    assert waiting.done() and connection.wake_timer is None
    await waiting


async def test_a_little_of_the_body_still_reaches_a_waiting_consumer() -> None:
    connection, _ = _connect()
    _read(connection, _head(1 << 20))
    waiting = asyncio.ensure_future(connection.wait(5))
    await asyncio.sleep(0)
    _read(connection, b"x")
    await asyncio.wait_for(waiting, 5)  # woken by the wake timer, not by more bytes
    assert bytes(connection.take().data) == b"x"


async def test_bytes_past_the_body_close_the_connection_and_are_never_handed_on() -> None:
    connection, transport = _connect()
    _read(connection, _head(5) + b"hello")
    _read(connection, b"HTTP/1.1 200 OK\r\n")
    assert transport.state == "closed" and not connection.framing.reusable
    assert bytes(connection.take().data) == b"hello" and connection.take() is None


async def test_a_connection_lost_mid_body_raises_to_the_waiting_consumer() -> None:
    connection, _ = _connect()
    _read(connection, _head(100) + bytes(10))
    waiting = asyncio.ensure_future(connection.wait(5))
    await asyncio.sleep(0)
    connection.connection_lost(None)
    await waiting  # woken; the error is raised at the next wait
    with pytest.raises(httpx.RemoteProtocolError, match="before the end of the body"):
        await connection.wait(5)
    assert not connection.usable


async def test_bytes_between_responses_make_an_idle_connection_unusable() -> None:
    connection, transport = _connect()
    _read(connection, _head(2) + b"ok")
    connection.take()
    connection.idle()
    assert connection.usable
    _read(connection, b"HTTP/1.1 200 OK\r\n")
    assert not connection.usable and transport.state == "closed"


async def test_a_wait_times_out_as_httpx_s_read_timeout() -> None:
    connection, _ = _connect()
    with pytest.raises(httpx.ReadTimeout):
        await connection.wait(0.01)


async def test_an_unfinished_body_is_aborted_a_finished_one_closed() -> None:
    connection, transport = _connect()
    _read(connection, _head(10) + b"12345")
    connection.close()
    assert transport.state == "aborted"
    connection, transport = _connect()
    _read(connection, _head(5) + b"12345")
    connection.close()
    assert transport.state == "closed"


@pytest.mark.parametrize("taken", [False, True])
async def test_a_body_closed_before_all_was_taken_drops_its_connection(taken: bool) -> None:
    connection, transport = _connect()
    _read(connection, _head(5))
    _read(connection, b"hello")  # arrived whole, in the buffer's run
    released: list[bool] = []
    body = BodyStream(connection, 5, lambda: released.append(True))
    if taken:
        assert bytes(connection.take().data) == b"hello"
    await body.aclose()
    assert released == ([True] if taken else [])
    assert transport.state == ("open" if taken else "closed")
