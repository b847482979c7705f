"""A bare relay: the least one extra hop between storage and client can cost on this host.

The service answering a bundle of a remote archive receives every byte from the storage and sends
it on; on a 2-core machine that also runs the storage server and the client, that hop's CPU is
taken from them. `BareRelay` is the hop and nothing else: no HTTP framework, no bundle format, no
retries; one GET of a presigned URL per request, received into a 1 MiB buffer (`recv_into`),
CRC-32'd (the service checks every payload before its last byte goes out) and sent (`sendall`),
one thread per connection. A row that compares the service with it shows what the service adds
over the hop itself.
"""

from __future__ import annotations

import socket
import threading
import urllib.parse

from reader.zipfmt import crc32

BUFFER = 1 << 20


class BareRelay:
    """Serves `upstream` (a presigned http:// URL) to every connection on 127.0.0.1:`port`."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urllib.parse.urlsplit(upstream)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        url = self.upstream
        with client, socket.create_connection((url.hostname, url.port)) as upstream:
            client.recv(1 << 16)  # the request: any GET gets the object
            upstream.sendall(f"GET {url.path}?{url.query} HTTP/1.1\r\nHost: {url.netloc}\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += upstream.recv(1 << 16)
            head, first = head.split(b"\r\n\r\n", 1)
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"upstream answered {head[:200]!r}")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))  # fmt: skip
            client.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                           % (length, first))  # fmt: skip
            crc = crc32(first)
            left = length - len(first)
            view = memoryview(bytearray(BUFFER))
            while left:
                nbytes = upstream.recv_into(view[: min(BUFFER, left)])
                if not nbytes:
                    raise RuntimeError(f"upstream closed with {left} bytes to go")
                crc = crc32(view[:nbytes], crc)
                client.sendall(view[:nbytes])
                left -= nbytes
