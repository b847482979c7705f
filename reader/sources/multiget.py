"""Several byte ranges in one GET (`Range: bytes=a-b,c-d`), each landed in its place: the I/O side
of multirange.py, for `HttpSource.read_ranges_into`.

An answer laid out as its first head predicts (multirange.layout: nginx's layout) is placed
without parsing: long parts (SCATTER_MIN on average) are received straight into their places, the
heads into a frame compared with the prediction afterwards; short ones come whole into one buffer,
its heads compared and its parts gathered out (scatter.gather). Anything else is parsed: its parts
copied in, or the parser's error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import numpy as np

from .base import fresh_buffer, per_range
from .exchange import Exchange
from .transport import multirange
from .transport.body import Body
from .transport.scatter import gather

# A multi-range read whose ranges average at least this many bytes is received straight into the
# caller's memory (one socket read per part at most); shorter parts come whole in one buffer and
# are copied out, fewer reads than parts
SCATTER_MIN = 64 << 10


async def ranges_once(
    exchange: Exchange, ranges: Sequence[tuple[int, int]], into: Sequence[memoryview], purpose: str
) -> bool:
    """One multi-range GET into `into` (raises Retry for transient trouble); False: the server does
    not serve several ranges a request (a 200, or one range as a plain 206: its body is not read)."""
    request = exchange.request("GET", {"Range": multirange.range_header(ranges), **exchange.pin()})
    response = await exchange.send(request, purpose)
    try:
        boundary = multirange.boundary_of(response.headers.get("content-type"))
        if response.status_code == 200 or (response.status_code == 206 and boundary is None):
            exchange.check_same_object(response, None)
            return False  # its body is dropped with the connection
        exchange.check_status(response, allow=(206,))
        exchange.check_same_object(response, None)
        assert boundary is not None
        body = exchange.body(response, purpose)
        views = per_range(into, ranges)
        laid = None
        if body.length is not None:
            window = await body.peek(multirange.HEAD_WINDOW)
            if window is not None:
                laid = multirange.layout(window, boundary, ranges, exchange.size)
        if laid is None or laid.length != body.length:
            chunks = _multipart_body(body)
        elif int(laid.sizes.sum()) >= SCATTER_MIN * len(ranges):
            frame = memoryview(bytearray(len(laid.frame)))
            sink, at = [], 0
            for head, view in zip(laid.heads.tolist(), views):
                sink += [frame[at : at + head], view]
                at += head
            sink.append(frame[at:])
            await body.land(sink)
            if frame == laid.frame:
                return True
            chunks = _one(_joined(sink))  # not laid out as its first head said
        else:
            whole = fresh_buffer(laid.length)
            await body.land(whole)
            if laid.check(whole):
                gather(np.frombuffer(whole, np.uint8), laid.starts, laid.sizes, into)
                return True
            chunks = _one(whole)
        parser = multirange.ByteRangesParser(boundary, ranges, exchange.size, exchange.location)
        async for chunk in chunks:
            for index, at, piece in parser.feed(chunk):
                views[index][at : at + len(piece)] = piece
        parser.finish()  # every range came, whole
        return True
    finally:
        await response.aclose()


async def _multipart_body(body: Body) -> AsyncIterator[memoryview | bytes]:
    """A multipart body's chunks; one with a Content-Length received whole into one buffer first
    (one allocation, huge pages, where each socket read would fault in a fresh one)."""
    if body.length is None:
        async for chunk in body.chunks():
            yield chunk
        return
    whole = fresh_buffer(body.length)
    await body.land(whole)
    yield whole


def _joined(buffers: list[memoryview]) -> memoryview:
    """The buffers' bytes end to end, in a buffer of their own."""
    return memoryview(bytearray(b"".join(buffers)))


async def _one(body: memoryview) -> AsyncIterator[memoryview]:
    yield body
