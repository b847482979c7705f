"""app/protocol.py's JoiningTransport over a socket pair: a small write waits for the next one or the
end of the loop turn (under uvicorn: test_protocol.py)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from app.protocol import HELD_MAX, JoiningTransport

pytestmark = pytest.mark.unit


async def _pair() -> tuple[JoiningTransport, socket.socket]:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
    return JoiningTransport(transport, loop), theirs  # type: ignore[arg-type]


def _available(sock: socket.socket) -> bytes:
    """What has arrived so far, without waiting."""
    got = b""
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            return got
        if not chunk:
            return got
        got += chunk


async def _arrived(sock: socket.socket, length: int) -> bytes:
    got = b""
    for _ in range(1000):
        got += _available(sock)
        if len(got) >= length:
            break
        await asyncio.sleep(0.001)
    return got


async def test_a_small_write_waits_for_the_next_one_or_the_end_of_the_loop_turn() -> None:
    joining, peer = await _pair()
    writes: list[list[bytes]] = []
    real_writelines = joining.transport.writelines

    def recorded(pieces: list[bytes]) -> None:  # a spy on the real transport under it
        writes.append(list(pieces))
        real_writelines(pieces)

    joining.transport.writelines = recorded  # type: ignore[method-assign]
    try:
        head, body = b"HTTP/1.1 200 OK\r\n\r\n", bytes(range(256)) * 256  # 64 KiB: not held
        joining.write(head)
        assert _available(peer) == b""  # held
        joining.write(body)
        assert writes == [[head, body]]  # both in one call, at once
        assert await _arrived(peer, len(head) + len(body)) == head + body

        joining.write(b"alone")  # no companion: sent when the loop turn ends
        assert _available(peer) == b""
        await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        assert _available(peer) == b"alone"

        joining.write(b"a")
        joining.write(b"b" * HELD_MAX)  # still small: held with it
        joining.write(b"c")
        assert _available(peer) == b""
        joining.close()  # a close sends what is held first
        assert await _arrived(peer, HELD_MAX + 2) == b"a" + b"b" * HELD_MAX + b"c"
    finally:
        joining.abort()
        peer.close()
