"""A remote object's open: its size, its version and the tail of its bytes, in one request where
the server takes suffix ranges (`Range: bytes=-N`), else HEAD and an explicit range.

The tail holds the end records, the central directory and often the configs, so an archive's
index usually costs this one request; a small object comes whole (a 200) and is kept entire.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..errors import SourceError
from .base import BytesAt
from .exchange import Exchange

SUFFIX_REFUSED_STATUS = {405, 416, 501}

Fetch = Callable[[int, int, str], Awaitable[bytes]]  # bytes [start, end) for a purpose


async def open_tail(exchange: Exchange, tail_size: int, fetch: Fetch) -> BytesAt:
    """The last `tail_size` bytes (or the whole object), `exchange` left knowing the version and
    size; one attempt (the caller retries). `fetch` reads a range once the size is known."""
    if not exchange.policy.suffix_open:
        return await _open_with_head(exchange, tail_size, fetch)
    response = await exchange.send(exchange.request("GET", {"Range": f"bytes=-{tail_size}"}), "open")
    try:
        if response.status_code in SUFFIX_REFUSED_STATUS:
            await response.aclose()
            return await _open_with_head(exchange, tail_size, fetch)
        exchange.check_status(response, allow=(200, 206))
        exchange.remember(response)
        if response.status_code == 200:
            whole = BytesAt(0, await exchange.whole_body(response, "open"))
            exchange.size = len(whole.data)
            return whole
        got = exchange.content_range(response)
        start, end, total = got.first, got.last, got.total
        assert start is not None and end is not None and total is not None
        if end != total - 1:
            raise SourceError(f"{exchange.location}: suffix range answered with bytes {start}-{end}/{total}")
        exchange.size = total
        return BytesAt(start, await exchange.body(response, "open").read(expected=end + 1 - start))
    finally:
        await response.aclose()


async def _open_with_head(exchange: Exchange, tail_size: int, fetch: Fetch) -> BytesAt:
    response = await exchange.send(exchange.request("HEAD", {}), "open")
    await response.aclose()
    exchange.check_status(response, allow=(200,))
    length = response.headers.get("content-length")
    if length is None or not length.isdigit():
        raise SourceError(f"{exchange.location}: no suffix ranges and no Content-Length; cannot find the end")
    exchange.remember(response)
    exchange.size = int(length)
    start = max(0, exchange.size - tail_size)
    return BytesAt(start, await fetch(start, exchange.size, "open"))
