"""The least an asyncio client can do to stream a range: the floor `ar.stream` is compared with.

One HTTP/1.1 GET with a Range header over a fresh connection; an `asyncio.BufferedProtocol`
receives into fresh 1 MiB buffers (as reader/sources/transport/http1/inbox.py does) and an async
generator hands
each socket read to the consumer, which computes the CRC-32 (as `ar.stream` does for a whole
entry). No retries, pinning, pooling or checks beyond the status and the byte count: what is left is
the cost of asyncio delivering bytes to an `async for`, which no client of that shape can avoid.
"""

from __future__ import annotations

import asyncio
import collections
import time
import urllib.parse

import numpy as np

from reader.zipfmt import crc32

BUFFER_SIZE = 1 << 20


class _Receiver(asyncio.BufferedProtocol):
    def __init__(self, loop: asyncio.AbstractEventLoop, length: int) -> None:
        self.loop, self.left = loop, length
        self.head = b""
        self.headed = False
        self.chunks: collections.deque[memoryview | bytes] = collections.deque()
        self.waiter: asyncio.Future[None] | None = None
        self.buffer, self.filled = memoryview(np.empty(BUFFER_SIZE, dtype=np.uint8)), 0
        self.error: Exception | None = None

    def get_buffer(self, sizehint: int) -> memoryview:
        if BUFFER_SIZE - self.filled < 64 << 10:
            self.buffer, self.filled = memoryview(np.empty(BUFFER_SIZE, dtype=np.uint8)), 0
        return self.buffer[self.filled :]

    def buffer_updated(self, nbytes: int) -> None:
        data = self.buffer[self.filled : self.filled + nbytes]
        self.filled += nbytes
        if not self.headed:
            self.head += bytes(data)
            if b"\r\n\r\n" not in self.head:
                return
            head, _, data = self.head.partition(b"\r\n\r\n")
            self.headed = True
            if not head.startswith(b"HTTP/1.1 206"):
                self.error = AssertionError(f"expected a 206, got {head[:40]!r}")
        if data:
            self.chunks.append(data)
            self.left -= len(data)
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.left:
            self.error = self.error or ConnectionError("connection closed before the end of the body")
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


async def _body(receiver: _Receiver):
    while True:
        if receiver.chunks:
            yield receiver.chunks.popleft()
        elif receiver.error is not None:
            raise receiver.error
        elif receiver.left <= 0:
            return
        else:
            receiver.waiter = receiver.loop.create_future()
            await receiver.waiter


async def run_floor(url: str, span: tuple[int, int]) -> dict:
    """Stream bytes [start, end) of `url`; seconds, CPU seconds and bytes, like the other contenders."""
    parts = urllib.parse.urlsplit(url)
    loop = asyncio.get_running_loop()
    cpu, started = time.process_time(), time.perf_counter()
    transport, receiver = await loop.create_connection(
        lambda: _Receiver(loop, span[1] - span[0]), parts.hostname, parts.port
    )
    head = (
        f"GET {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nRange: bytes={span[0]}-{span[1] - 1}\r\n\r\n"
    )
    transport.write(head.encode())
    total = crc = 0
    try:
        async for chunk in _body(receiver):
            total += len(chunk)
            crc = crc32(chunk, crc)
    finally:
        transport.close()
    return {"seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu, "bytes": total}
