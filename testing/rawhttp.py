"""One HTTP/1.1 exchange over a raw socket, for requests no HTTP client sends: a 32 MB header, a
200 MB body that stops as soon as the server answers. Counts what was sent before the answer."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass
class Answer:
    status: int | None  # None: the connection ended before a status line
    headers: dict[str, str]
    body: bytes
    sent: int  # bytes of the request written before the answer was complete or the write failed

    def error_code(self) -> str:
        return json.loads(self.body)["error"]["code"]


def pieces(total: int, size: int = 1 << 20, fill: bytes = b"a") -> Iterator[bytes]:
    """`total` bytes of `fill` in pieces of `size` (one piece object, reused)."""
    piece = fill * size
    for start in range(0, total, size):
        yield piece if start + size <= total else piece[: total - start]


def chunked(parts: Iterable[bytes]) -> Iterator[bytes]:
    """`parts` as chunked transfer coding, ending with the last chunk."""
    for part in parts:
        yield b"%x\r\n" % len(part) + part + b"\r\n"
    yield b"0\r\n\r\n"


def exchange(url: str, request: Iterable[bytes], timeout: float = 60.0) -> Answer:
    """Send `request` (its pieces, in order) to the server of `url` until the server's answer is
    complete (a Content-Length's worth of body, or the connection closed); stop sending as soon
    as the answer has begun, or when the server stops reading (the write fails)."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
    sock.setblocking(False)
    pending, source = memoryview(b""), iter(request)
    received, sent, writing = bytearray(), 0, True
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if writing and not pending:
                piece = next(source, None)
                writing = piece is not None
                pending = memoryview(piece or b"")
            readable, writable, _ = select.select([sock], [sock] if writing else [], [], 1.0)
            if readable:
                try:
                    data = sock.recv(1 << 16)
                except ConnectionResetError:
                    break
                if not data:
                    break
                received += data
                writing = False  # the answer has begun: send nothing more
                if _complete(received):
                    break
            elif writable and writing:
                try:
                    count = sock.send(pending)
                except (BrokenPipeError, ConnectionResetError):
                    writing = False
                    continue
                sent += count
                pending = pending[count:]
    finally:
        sock.close()
    return _parse(bytes(received), sent)


def _complete(received: bytearray) -> bool:
    _, sep, body = bytes(received).partition(b"\r\n\r\n")
    if not sep:
        return False
    length = _parse(bytes(received), 0).headers.get("content-length")
    return length is not None and len(body) >= int(length)


def _parse(received: bytes, sent: int) -> Answer:
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines[0].startswith("HTTP/"):
        return Answer(None, {}, received, sent)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Answer(int(lines[0].split()[1]), headers, body, sent)
