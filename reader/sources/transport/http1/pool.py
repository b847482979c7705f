"""Connections by origin: opened (straight, or through a proxy and its CONNECT tunnel), verified
(tls.py's context), kept alive and reused.

A connection is kept only after an exchange whose body was read to its end exactly (a
Content-Length body) and whose server keeps it open; any other ending (cut, cancelled, extra
bytes, `Connection: close`, a body framed by chunks or by the close) drops it, so a pooled
connection never holds a byte of an earlier response. A pooled connection the server closed
meanwhile is replaced by a new one before any byte of the response is taken.

`HttpOptions.resolve_host`, when set, answers the addresses to connect to, for every host and every
redirect hop (IP literals included), and the connection goes to one of those very addresses, so a
name that resolves differently a moment later (DNS rebinding) changes nothing. Through a proxy it is
asked about the target host too, and the proxy is asked for a CONNECT tunnel to the first address it
answered (for http as for https; TLS still verifies the name, the Host field still names it), so the
proxy resolves nothing itself.
"""

from __future__ import annotations

import asyncio
import functools
import ssl

import h11
import httpx

from ..options import ResolveHost
from ..proxies import Proxy
from .connection import Connection
from .stream import BodyStream

Origin = tuple[str, str, int, str]


class _Stale(Exception):
    """A pooled connection closed before any byte of the response came back."""


class Pool:
    """Connections by origin: idle ones are reused, at most `max_idle` each. `receive_thread`:
    long streamed bodies are received on a thread (HttpOptions.receive_thread)."""

    def __init__(
        self,
        verify: ssl.SSLContext,
        proxy: Proxy | None = None,
        max_idle: int = 8,
        *,
        receive_thread: bool = True,
        resolve_host: ResolveHost | None = None,
    ) -> None:
        self.verify = verify
        self.proxy = proxy  # every connection goes through it (proxies.py)
        self.resolve_host = resolve_host  # HttpOptions.resolve_host: the addresses to connect to
        self.max_idle = max_idle
        self.receive_thread = receive_thread
        self.idle: dict[Origin, list[Connection]] = {}

    async def send(self, request: httpx.Request, content: bytes) -> tuple[h11.Response, BodyStream]:
        """Send `request` (its body: `content`); the response's head, and its body as it streams
        from the connection."""
        origin = _origin(request)
        idle = self.idle.get(origin, [])
        while idle:
            connection = idle.pop()
            if not connection.usable:
                connection.close()
                continue
            try:
                return await self._exchange(connection, request, content, origin, reused=True)
            except _Stale:
                continue
        connection = await self._connect(request, origin)
        return await self._exchange(connection, request, content, origin, reused=False)

    async def _connect(self, request: httpx.Request, origin: Origin) -> Connection:
        connection = Connection(asyncio.get_running_loop())
        where = f"{origin[1]}:{origin[2]}" if self.proxy is None else f"proxy {self.proxy.url}"
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancellation that
            # meets a connection just made, and the cancelled read would carry on
            async with asyncio.timeout(request.extensions.get("timeout", {}).get("connect")):
                await self._open(connection, origin)
        except BaseException as exc:
            connection.close()
            if isinstance(exc, TimeoutError):
                raise httpx.ConnectTimeout(f"connecting to {where} timed out") from exc
            if isinstance(exc, (OSError, ssl.SSLError, httpx.RemoteProtocolError)):
                raise httpx.ConnectError(f"{type(exc).__name__}: {exc}") from exc
            raise
        return connection

    async def _open(self, connection: Connection, origin: Origin) -> None:
        """Connect: straight to the origin, or to the proxy (then a CONNECT tunnel for https)."""
        scheme, host, port, sni = origin
        loop, proxy, https = connection.loop, self.proxy, scheme == "https"
        if proxy is None:
            addresses = [host] if self.resolve_host is None else await self.resolve_host(host, port)
            for index, address in enumerate(addresses):  # the addresses the hook checked, in turn
                try:
                    await loop.create_connection(
                        lambda: connection,
                        address,
                        port,
                        ssl=self.verify if https else None,
                        server_hostname=sni if https else None,
                    )
                    return
                except OSError:
                    if index == len(addresses) - 1:
                        raise
            raise OSError(f"{host} resolved to no address")
        target = host
        if self.resolve_host is not None:  # the proxy would resolve the name again, on its own: so
            checked = await self.resolve_host(host, port)  # the tunnel goes to the address checked
            if not checked:
                raise OSError(f"{host} resolved to no address")
            target = checked[0]
        to_proxy_tls = proxy.scheme == "https"
        await loop.create_connection(
            lambda: connection,
            proxy.host,
            proxy.port,
            ssl=self.verify if to_proxy_tls else None,
            server_hostname=proxy.host if to_proxy_tls else None,
        )
        if https or target != host:  # http to a checked address: a tunnel too, the Host field kept
            await connection.tunnel(target, port, proxy)
        if https:
            assert connection.transport is not None
            tls = await loop.start_tls(connection.transport, connection, self.verify, server_hostname=sni)
            connection.connection_made(tls)

    async def _exchange(
        self, connection: Connection, request: httpx.Request, content: bytes, origin: Origin, *, reused: bool
    ) -> tuple[h11.Response, BodyStream]:
        read_timeout = request.extensions.get("timeout", {}).get("read")
        try:
            connection.send_request(request, content, self.proxy)
            head = await connection.wait_head(read_timeout)
        except h11.LocalProtocolError as exc:  # a request h11 will not write
            connection.close()
            raise httpx.LocalProtocolError(str(exc)) from exc
        except httpx.RemoteProtocolError:
            connection.close()
            if reused and not connection.inbox.answered:
                raise _Stale() from None
            raise
        except BaseException:
            connection.close()
            raise
        release = functools.partial(self._release, origin, connection)
        return head, BodyStream(connection, read_timeout, release, receive_thread=self.receive_thread)

    def _release(self, origin: Origin, connection: Connection) -> None:
        """A body read to its end: keep its connection if it can carry another exchange."""
        idle = self.idle.setdefault(origin, [])
        if connection.framing.reusable and len(idle) < self.max_idle:
            connection.idle()
            idle.append(connection)
        else:
            connection.close()

    def close(self) -> None:
        for idle in self.idle.values():
            for connection in idle:
                connection.close()
        self.idle.clear()


def _origin(request: httpx.Request) -> Origin:
    url = request.url
    https = url.scheme == "https"
    return url.scheme, url.host, url.port or (443 if https else 80), sni_hostname(request) or url.host


def sni_hostname(request: httpx.Request) -> str | None:
    """The TLS server name httpx was asked to use instead of the URL's host, if any."""
    value = request.extensions.get("sni_hostname")
    return value.decode() if isinstance(value, bytes) else value
