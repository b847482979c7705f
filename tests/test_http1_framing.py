"""The HTTP/1.1 client's sans-IO core (reader/sources/transport/http1/framing.py, inbox.py) driven by byte
strings alone, no socket and no event loop: heads split anywhere, counted bodies into receive buffers
or the caller's memory, chunked and read-until-close bodies through h11, bodiless answers, bodies
longer than declared, connections closed mid-body, reuse, and one exchange at a time."""

from __future__ import annotations

import h11
import httpx
import pytest

from reader.sources.transport.http1.framing import Data, Framing, Head
from reader.sources.transport.http1.inbox import BUFFER_SIZE, Inbox, Posted, Read, Received
from reader.sources.transport.scatter import Scatter

pytestmark = pytest.mark.unit

BODY = bytes(range(256)) * 40  # 10,240 bytes


def _head(length: int | None = len(BODY), *extra: str, status: str = "200 OK", version: str = "1.1") -> bytes:
    lines = [f"HTTP/{version} {status}"] + ([f"Content-Length: {length}"] if length is not None else [])
    return ("\r\n".join([*lines, *extra]) + "\r\n\r\n").encode()


def _start(method: bytes = b"GET") -> Inbox:
    inbox = Inbox()
    inbox.framing.request(method, b"/blob", [(b"Host", b"example")])
    return inbox


def _feed(inbox: Inbox, data: bytes, read: int = 1 << 30) -> list[Read]:
    """`data` as the socket would write it: at most `read` bytes a read, each into the buffer handed out."""
    reads = []
    while data:
        buffer = inbox.get_buffer()
        nbytes = min(len(buffer), len(data), read)
        buffer[:nbytes] = data[:nbytes]
        reads.append(inbox.received(nbytes))
        data = data[nbytes:]
    return reads


def _drain(inbox: Inbox) -> list:
    chunks = []
    while (taken := inbox.take()) is not None:
        chunks.append(taken)
    return chunks


def test_the_request_is_written_by_h11_with_its_body() -> None:
    framing = Framing()
    data = framing.request(b"POST", b"/x?y=1", [(b"Host", b"h"), (b"Content-Length", b"3")], b"abc")
    assert data == b"POST /x?y=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
    assert framing.expecting and framing.head is None


@pytest.mark.parametrize("step", [1, 2, 7, 64])
def test_a_head_split_across_feeds_is_one_head_and_the_body_follows_counted(step: int) -> None:
    framing = Framing()
    framing.request(b"GET", b"/", [(b"Host", b"h")])
    wire = _head(5, "X-A: b") + b"hello"
    events = []
    for at in range(0, len(_head(5, "X-A: b")), step):
        events += framing.feed(wire[at : min(at + step, len(_head(5, "X-A: b")))])
    [head] = [event for event in events if isinstance(event, Head)]
    assert head.response.status_code == 200 and (b"x-a", b"b") in head.response.headers
    assert framing.counting and framing.remaining == 5 and not framing.done
    assert framing.count(5) == 5 and framing.done and framing.reusable and not framing.stopped


def test_the_bytes_that_came_with_the_head_are_the_body_s_first() -> None:
    framing = Framing()
    framing.request(b"GET", b"/", [(b"Host", b"h")])
    events = framing.feed(_head(10) + b"0123")
    assert [type(event) for event in events] == [Head, Data] and events[1].data == b"0123"
    assert framing.remaining == 10  # counted by the caller, as every counted byte


@pytest.mark.parametrize("step", [1, 1000, 1 << 20])
def test_a_counted_body_arrives_in_runs_of_its_receive_buffers(step: int) -> None:
    inbox = _start()
    wire = _head() + BODY
    reads = _feed(inbox, wire, read=step)
    assert reads[-1] is (Read.BODY if step < len(wire) else Read.PARSED)  # all of it with the head
    assert inbox.done and inbox.framing.reusable
    chunks = _drain(inbox)
    assert all(type(chunk) is Received and chunk.crcs is None for chunk in chunks)
    assert b"".join(bytes(chunk.data) for chunk in chunks) == BODY
    assert inbox.held == 0


def test_reads_the_consumer_has_not_taken_join_one_chunk_and_a_taken_chunk_is_never_grown() -> None:
    inbox = _start()
    _feed(inbox, _head())  # the head alone: its buffer
    _feed(inbox, BODY[:100])
    _feed(inbox, BODY[100:300])
    assert inbox.held == 300
    taken = inbox.take()
    assert type(taken) is Received and bytes(taken.data) == BODY[:300] and inbox.take() is None
    _feed(inbox, BODY[300:400])
    assert bytes(taken.data) == BODY[:300]  # what was handed on stays as it was
    again = inbox.take()
    assert bytes(again.data) == BODY[300:400] and again.data.obj is taken.data.obj  # the same buffer
    assert inbox.held == 0


def test_a_full_receive_buffer_is_followed_by_a_fresh_one_never_reused() -> None:
    body = bytes(range(251)) * ((BUFFER_SIZE * 2) // 251 + 1)
    inbox = _start()
    _feed(inbox, _head(len(body)))
    first = inbox.get_buffer()
    _feed(inbox, body, read=300_000)  # nothing taken meanwhile: a chunk a buffer
    chunks = _drain(inbox)
    assert len(chunks) == 3 and len({id(chunk.data.obj) for chunk in chunks}) == 3
    assert b"".join(bytes(chunk.data) for chunk in chunks) == body
    assert first.obj is chunks[0].data.obj
    assert inbox.get_buffer().obj is not first.obj


@pytest.mark.parametrize("parts", [[len(BODY)], [10, 4000, len(BODY) - 4010]])
def test_a_counted_body_lands_in_the_caller_s_memory_with_nothing_queued(parts: list[int]) -> None:
    inbox = _start()
    _feed(inbox, _head() + BODY[:10])  # its first bytes came with the head
    memory = bytearray(len(BODY))
    first = inbox.take()
    memory[: len(first.data)] = first.data
    views, at = [], 0
    for size in parts:
        views.append(memoryview(memory)[at : at + size])
        at += size
    sink = Scatter(views)
    sink.advance(len(first.data))
    inbox.land_into(sink)
    reads = _feed(inbox, BODY[10:], read=999)
    assert set(reads) == {Read.LANDED} and inbox.landed == len(BODY) - 10
    assert bytes(memory) == BODY and inbox.done and not inbox.chunks
    assert len(inbox.get_buffer()) == BUFFER_SIZE  # past the body: a buffer of its own, not the sink


def test_memory_of_another_size_than_the_body_is_refused() -> None:
    inbox = _start()
    _feed(inbox, _head())
    with pytest.raises(ValueError, match="a body of 10240 bytes for 10 bytes of memory"):
        inbox.land_into(Scatter([memoryview(bytearray(10))]))


@pytest.mark.parametrize("step", [1, 5, 1000])
def test_a_chunked_body_is_parsed_by_h11_and_its_connection_not_kept(step: int) -> None:
    inbox = _start()
    wire = _head(None, "Transfer-Encoding: chunked") + b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    reads = _feed(inbox, wire, read=step)
    assert set(reads) == {Read.PARSED} and not inbox.framing.counting
    chunks = _drain(inbox)
    assert all(type(chunk) is Received for chunk in chunks)
    assert b"".join(chunk.data for chunk in chunks) == b"hello world"
    assert inbox.done and inbox.framing.stopped and not inbox.framing.reusable


def test_a_body_read_until_the_close_ends_at_the_close() -> None:
    inbox = _start()
    _feed(inbox, _head(None, "Connection: close") + b"all of it")
    assert not inbox.done
    inbox.lost()
    assert inbox.error is None and inbox.done and not inbox.framing.reusable
    assert b"".join(chunk.data for chunk in _drain(inbox)) == b"all of it"


@pytest.mark.parametrize(
    ("method", "status"), [(b"HEAD", "200 OK"), (b"GET", "204 No Content"), (b"GET", "304 Not Modified")]
)
def test_a_bodyless_answer_ends_at_its_head_whatever_its_content_length(method: bytes, status: str) -> None:
    inbox = _start(method)
    _feed(inbox, _head(len(BODY), status=status))
    assert inbox.framing.head is not None and inbox.done and inbox.framing.reusable
    assert not inbox.chunks and not inbox.framing.stopped


def test_a_body_longer_than_declared_is_cut_and_its_connection_stopped() -> None:
    inbox = _start()
    reads = _feed(inbox, _head(100) + BODY[:60])
    _feed(inbox, BODY[60:200])
    assert reads == [Read.PARSED] and inbox.done
    assert b"".join(bytes(chunk.data) for chunk in _drain(inbox)) == BODY[:100]
    assert inbox.framing.stopped and not inbox.framing.reusable


def test_extra_bytes_with_the_head_are_cut_too() -> None:
    inbox = _start()
    _feed(inbox, _head(3) + b"abcdef")
    assert b"".join(bytes(chunk.data) for chunk in _drain(inbox)) == b"abc"
    assert inbox.done and inbox.framing.stopped and not inbox.framing.reusable


@pytest.mark.parametrize("wire", [b"", b"HTTP/1.1 200 OK\r\nContent-Le", _head(100) + BODY[:40]])
def test_a_connection_closed_before_the_end_is_an_error(wire: bytes) -> None:
    inbox = _start()
    _feed(inbox, wire)
    inbox.lost()
    assert isinstance(inbox.error, httpx.RemoteProtocolError)
    assert "server closed the connection" in str(inbox.error) and not inbox.done
    assert ("before the end of the body" in str(inbox.error)) == (inbox.framing.head is not None)
    assert not inbox.framing.reusable


@pytest.mark.parametrize("wire", [b"", _head(100) + BODY[:40], b"HTTP/1.1 abc nonsense\r\n\r\n"])
def test_a_kept_error_holds_no_frames(wire: bytes) -> None:
    """A kept error is raised to the consumer later: the frames it was caught in (which reach back
    through the event loop to its caller's memory) are not kept with it."""
    inbox = _start()
    _feed(inbox, wire)
    try:
        raise RuntimeError("handled while the connection closes")
    except RuntimeError:
        inbox.lost()
    assert isinstance(inbox.error, httpx.RemoteProtocolError)
    assert inbox.error.__traceback__ is None and inbox.error.__context__ is None


def test_a_chunked_body_cut_by_the_close_is_an_error() -> None:
    inbox = _start()
    _feed(inbox, _head(None, "Transfer-Encoding: chunked") + b"5\r\nhel")
    inbox.lost()
    assert str(inbox.error) == "server closed the connection before the end of the body"


def test_a_malformed_head_is_httpx_s_protocol_error_and_stops_the_connection() -> None:
    inbox = _start()
    _feed(inbox, b"HTTP/1.1 abc nonsense\r\n\r\n")
    assert isinstance(inbox.error, httpx.RemoteProtocolError) and inbox.framing.stopped


@pytest.mark.parametrize(
    ("extra", "version", "kept"),
    [((), "1.1", True), (("Connection: close",), "1.1", False), ((), "1.0", False)],
)
def test_a_connection_is_reusable_after_an_exact_body_unless_the_server_closes_it(
    extra: tuple[str, ...], version: str, kept: bool
) -> None:
    inbox = _start()
    _feed(inbox, _head(5, *extra, version=version) + b"first")
    assert inbox.done and inbox.framing.reusable is kept
    if not kept:
        return
    _drain(inbox)
    inbox.idle()
    assert not inbox.framing.expecting and inbox.error is None and inbox.get_buffer() is inbox.head_buffer
    inbox.framing.request(b"GET", b"/again", [(b"Host", b"h")])
    _feed(inbox, _head(6) + b"second")
    assert b"".join(bytes(chunk.data) for chunk in _drain(inbox)) == b"second" and inbox.framing.reusable


def test_bytes_between_responses_are_an_error() -> None:
    inbox = _start()
    _feed(inbox, _head(2) + b"ok")
    _drain(inbox)
    inbox.idle()
    _feed(inbox, b"HTTP/1.1 200 OK\r\n")  # a server speaking out of turn
    assert str(inbox.error) == "server sent bytes between responses" and inbox.framing.stopped


def test_a_request_h11_will_not_write_is_refused_and_leaves_the_framing_idle() -> None:
    framing = Framing()
    with pytest.raises(h11.LocalProtocolError):
        framing.request(b"GET", b"/", [(b"Host", b"h"), (b"Bad Name", b"x")])
    assert not framing.expecting
    assert framing.request(b"GET", b"/", [(b"Host", b"h")]).startswith(b"GET / HTTP/1.1")


def test_a_second_request_before_the_response_ends_is_refused() -> None:
    framing = Framing()
    framing.request(b"GET", b"/", [(b"Host", b"h")])
    with pytest.raises(h11.LocalProtocolError, match="one exchange at a time"):
        framing.request(b"GET", b"/again", [(b"Host", b"h")])
    framing.feed(_head(0))
    with pytest.raises(h11.LocalProtocolError):  # ended, but not yet idle
        framing.request(b"GET", b"/again", [(b"Host", b"h")])


def test_a_receive_thread_s_buffers_are_posted_with_their_crcs() -> None:
    inbox = _start()
    _feed(inbox, _head(len(BODY)) + BODY[:40])
    assert len(inbox.take().data) == 40
    _feed(inbox, BODY[40:50])  # read on the loop before the thread took over
    inbox.posted(memoryview(BODY)[50:5000], [1, 2], trailing=False)
    inbox.posted(memoryview(BODY)[5000:], None, trailing=True)
    loop, first, last = _drain(inbox)
    assert type(loop) is Received and bytes(loop.data) == BODY[40:50]  # in the order received
    assert type(first) is Posted and first.crcs == [1, 2] and bytes(first.data) == BODY[50:5000]
    assert last.crcs is None and bytes(last.data) == BODY[5000:]
    assert inbox.done and not inbox.framing.reusable  # bytes came past the body: not kept


def test_queued_shows_what_came_first_without_taking_it() -> None:
    inbox = _start()
    _feed(inbox, _head() + BODY[:10])
    _feed(inbox, BODY[10:50])
    assert inbox.queued() == BODY[:50] and inbox.held == 50
    assert b"".join(bytes(chunk.data) for chunk in _drain(inbox)) == BODY[:50]


def test_an_informational_answer_before_the_head_is_skipped() -> None:
    inbox = _start()
    _feed(inbox, b"HTTP/1.1 100 Continue\r\n\r\n" + _head(2) + b"ok")
    assert inbox.framing.head.status_code == 200 and inbox.done
    assert b"".join(bytes(chunk.data) for chunk in _drain(inbox)) == b"ok"
