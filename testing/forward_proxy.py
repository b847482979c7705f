"""A small HTTP forward proxy for the tests (asyncio, loopback): what goes through it is logged.

It speaks the two forms clients use: `CONNECT host:port` (a tunnel, for https: the bytes are
relayed untouched) and an absolute-form request (`GET http://host:port/path`, for http: sent on
to the origin in origin form, one request per connection). With `credentials`, a request
without the matching `Proxy-Authorization: Basic` is answered 407.

    async with ForwardProxy(credentials=("user", "secret")) as proxy:
        os.environ["HTTPS_PROXY"] = proxy.url_with_credentials
        ...
        proxy.log  # [{"method", "target", "range", "authorization", "status", "bytes"}]
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import urllib.parse

HOST = "127.0.0.1"
HOP_BY_HOP = {"proxy-authorization", "proxy-connection", "connection", "keep-alive"}


class ForwardProxy:
    def __init__(
        self, *, credentials: tuple[str, str] | None = None, tls: ssl.SSLContext | None = None
    ) -> None:
        """tls: a server context: the proxy itself is reached over TLS (an https:// proxy URL)."""
        self.credentials = credentials
        self.tls = tls
        self.log: list[dict] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{HOST}:{self.port}"

    @property
    def url_with_credentials(self) -> str:
        assert self.credentials is not None
        user, password = (urllib.parse.quote(part, safe="") for part in self.credentials)
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{user}:{password}@{HOST}:{self.port}"

    async def __aenter__(self) -> ForwardProxy:
        self._server = await asyncio.start_server(self._accept, HOST, 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            request_line, *lines = head.decode("latin-1").split("\r\n")[:-2]
            method, target, _version = request_line.split(" ", 2)
            headers = [
                (name.strip(), value.strip()) for name, value in (line.split(":", 1) for line in lines)
            ]
            authorization = next((v for k, v in headers if k.lower() == "proxy-authorization"), None)
            asked = next((v for k, v in headers if k.lower() == "range"), None)
            entry = {
                "range": asked,
                "method": method,
                "target": target,
                "authorization": authorization,
                "status": 0,
                "bytes": 0,
            }
            self.log.append(entry)
            if self.credentials is not None and authorization != _basic(*self.credentials):
                entry["status"] = 407
                writer.write(
                    b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                    b'Proxy-Authenticate: Basic realm="test"\r\n'
                    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
                )
                await writer.drain()
                return
            if method == "CONNECT":
                await self._tunnel(target, reader, writer, entry)
            else:
                await self._forward(method, target, headers, reader, writer, entry)
        finally:
            writer.close()

    async def _tunnel(
        self, target: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, entry: dict
    ) -> None:
        host, _, port = target.rpartition(":")
        upstream = await self._open(host.strip("[]"), int(port), writer, entry)
        if upstream is None:
            return
        entry["status"] = 200
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await _relay(reader, writer, *upstream, entry)

    async def _forward(
        self,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        entry: dict,
    ) -> None:
        url = urllib.parse.urlsplit(target)
        if url.scheme != "http" or not url.hostname:
            entry["status"] = 400
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        upstream = await self._open(url.hostname, url.port or 80, writer, entry)
        if upstream is None:
            return
        entry["status"] = 200
        path = url.path or "/"
        kept = [f"{k}: {v}\r\n" for k, v in headers if k.lower() not in HOP_BY_HOP]
        head = f"{method} {path}{'?' + url.query if url.query else ''} HTTP/1.1\r\n{''.join(kept)}"
        upstream[1].write((head + "Connection: close\r\n\r\n").encode("latin-1"))
        await _relay(reader, writer, *upstream, entry)

    async def _open(
        self, host: str, port: int, writer: asyncio.StreamWriter, entry: dict
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        try:
            return await asyncio.open_connection(host, port)
        except OSError:
            entry["status"] = 502
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return None


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def _relay(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream_writer: asyncio.StreamWriter,
    entry: dict,
) -> None:
    """Both directions until either side closes; `entry["bytes"]` counts what came back."""

    async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter, counted: bool) -> None:
        try:
            while data := await source.read(1 << 16):
                sink.write(data)
                if counted:
                    entry["bytes"] += len(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            sink.close()

    try:
        await asyncio.gather(
            copy(client_reader, upstream_writer, False), copy(upstream_reader, client_writer, True)
        )
    finally:
        upstream_writer.close()
        with contextlib.suppress(Exception):
            await upstream_writer.wait_closed()
