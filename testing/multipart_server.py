"""A tiny HTTP/1.1 server whose multipart/byteranges answers can be wrong in chosen ways, for the
multi-range reader's tests."""

from __future__ import annotations

import asyncio
import contextlib
import re


class MultipartServer:
    """HTTP/1.1 on loopback serving one object: a suffix or single range as 206, several ranges as
    multipart/byteranges, `fault` applied to the parts of every multi-range answer but the probe's."""

    def __init__(self, data: bytes, fault: str) -> None:
        self.data, self.fault = data, fault
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> MultipartServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}/m.pt2"

    async def _serve(self, reader_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader_.readuntil(b"\r\n\r\n")
                asked = re.search(rb"(?im)^range:\s*bytes=(\S+)\r$", head)
                status, headers, body = self._answer(asked.group(1).decode() if asked else None)
                lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", 'ETag: "v1"', *headers]
                answer = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
                if self.fault == "cut-once" and "multipart" in str(headers) and len(body) > 1 << 16:
                    self.fault = "none"  # the first long multipart answer is cut half way, once
                    writer.write(answer[: len(answer) // 2])
                    await writer.drain()
                    break
                writer.write(answer)
                await writer.drain()
        writer.close()

    def _answer(self, spec: str | None) -> tuple[str, list[str], bytes]:
        size = len(self.data)
        if spec is None:
            return "200 OK", [], self.data
        if spec.startswith("-"):
            start = max(0, size - int(spec[1:]))
            return "206 Partial", [f"Content-Range: bytes {start}-{size - 1}/{size}"], self.data[start:]
        ranges = [(int(a), int(b) + 1) for a, b in (part.split("-") for part in spec.split(","))]
        if len(ranges) == 1:
            ((start, end),) = ranges
            return "206 Partial", [f"Content-Range: bytes {start}-{end - 1}/{size}"], self.data[start:end]
        if self.fault == "single-206":  # one range of those asked, as a plain 206
            (start, end) = ranges[0]
            return "206 Partial", [f"Content-Range: bytes {start}-{end - 1}/{size}"], self.data[start:end]
        parts = []
        order = list(enumerate(ranges))
        if self.fault == "reordered":  # the right parts, the first one first, the others reversed
            order[1:] = order[:0:-1]
        for number, (start, end) in order:
            body, named = self.data[start:end], (start, end)
            if self.fault == "wrong-range" and number == 1 and len(ranges) > 2:
                named = (start + 4, end + 4)  # the bytes of the asked range, named as another one
            if self.fault == "short" and number == 1 and len(ranges) > 2:
                body = body[:-4]
            parts.append(
                b"\r\n--B0UND\r\nContent-Range: bytes %d-%d/%d\r\n\r\n" % (named[0], named[1] - 1, size)
                + body
            )
        body = b"".join(parts) + b"\r\n--B0UND--\r\n"
        return "206 Partial", ["Content-Type: multipart/byteranges; boundary=B0UND"], body
