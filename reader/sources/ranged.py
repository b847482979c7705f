"""The one ranged read of a remote source: bytes [start, end) into the caller's memory or as chunks,
over one connection at a time, retried and resumed from the first byte that did not arrive.

`ranged` is a single GET and checks its answer (a 206 of exactly the range asked, of the version
opened; a 200 of a small object, sliced); `resumed` repeats it from where the last one stopped
until every byte is in, backing off between attempts within the read's budgets. Both yield each
piece as it lands, a view of the caller's buffer (`into`) or a chunk of the body, so a cut loses
nothing already here. Parallel parts (parallel.py) run one `resumed` a part.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import aclosing

from .base import Checked
from .exchange import Exchange
from .transport.retry import Retry, back_off, check_deadline

Piece = bytes | memoryview


async def ranged(
    exchange: Exchange,
    start: int,
    end: int,
    purpose: str,
    *,
    into: memoryview | None = None,
    checked: Checked | None = None,
) -> AsyncIterator[Piece]:
    """One GET of [start, end); raises Retry for transient trouble. With `into` (as long as the
    range) the body lands there and each landed stretch is yielded as a view of it; else the body's
    chunks are, `checked` told of the CRC-32s the transport took of them (as archive offsets)."""
    response = await exchange.send(exchange.range_request(start, end), purpose)
    try:
        if response.status_code == 200:
            whole = await exchange.whole_body(response, purpose)
            exchange.check_same_object(response, len(whole))
            if into is None:
                yield whole[start:end]
            else:
                into[:] = whole[start:end]
                yield into
            return
        exchange.check_partial(response, start, end)
        body = exchange.body(response, purpose)
        if into is None:
            archive = None if checked is None else functools.partial(_shifted, checked, start)
            async for chunk in body.chunks(end - start, archive):
                yield chunk
            return
        at = 0
        async for nbytes in body.into(into):
            yield into[at : at + nbytes]
            at += nbytes
    finally:
        await response.aclose()


async def resumed(
    exchange: Exchange,
    start: int,
    end: int,
    purpose: str,
    until: float | None,
    *,
    into: memoryview | None = None,
    checked: Checked | None = None,
) -> AsyncIterator[Piece]:
    """[start, end) as `ranged` yields it, again from the next byte after a Retry until all of it
    came, within the attempts and the deadline `until`."""
    position = start
    attempt = 0
    while position < end:
        rest = None if into is None else into[position - start :]
        try:
            pieces = ranged(exchange, position, end, purpose, into=rest, checked=checked)
            async with aclosing(pieces) as arriving:
                async for piece in arriving:
                    position += len(piece)
                    check_deadline(until, exchange.location)
                    yield piece
            if position < end:
                raise Retry(f"body ended after {position - start} of {end - start} bytes")
        except Retry as problem:
            attempt += 1
            await back_off(problem, attempt, until, exchange.options, exchange.location)


def _shifted(checked: Checked, start: int, at: int, nbytes: int, crc: int) -> None:
    """`checked` told of body offsets as the archive's (the body starts at `start`)."""
    checked(start + at, nbytes, crc)
