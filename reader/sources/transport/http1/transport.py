"""The httpx transport of every HTTP/1.1 request: httpx stays the client API, this is the wire.

httpx keeps what it is good at: auth flows (SigV4, bearer tokens), redirects, timeouts, the
proxy routes (proxies.py's mounts), and HTTP/2 on request (httpcore, a transport of its own).
Under it, httpx's HTTP/1.1 path (httpcore + h11) parses in Python and hands out 64 KiB a read,
far below curl on loopback; this transport hands out each socket read as it landed
(up to 1 MiB, no copy: connection.py), from connections kept by origin (pool.py).

A response's body is a `BodyStream`: iterated, it is bytes-like chunks as any httpx body; a
caller that has the body's final memory asks `Http1Response.body` to land it there instead
(sources/transport/body.py does, for every read of a source).
"""

from __future__ import annotations

import ssl

import httpx

from ..options import ResolveHost
from ..proxies import Proxy
from .pool import Pool
from .stream import BodyStream


class Http1Response(httpx.Response):
    """A response whose body this transport receives: `body` can land it in the caller's memory."""

    body: BodyStream


class Http1Transport(httpx.AsyncBaseTransport):
    """Sends httpx requests over pooled HTTP/1.1 connections (pool.py), straight or through `proxy`."""

    def __init__(
        self,
        *,
        verify: ssl.SSLContext,
        proxy: Proxy | None = None,
        receive_thread: bool = True,
        resolve_host: ResolveHost | None = None,
    ) -> None:
        self._pool = Pool(verify, proxy, receive_thread=receive_thread, resolve_host=resolve_host)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme not in ("http", "https"):  # a redirect elsewhere: as httpcore says it
            raise httpx.UnsupportedProtocol(f"cannot follow a redirect to a {request.url.scheme}:// URL")
        # read, not `request.content`: the request httpx builds to follow a redirect is unread
        content = await request.aread()
        head, body = await self._pool.send(request, content)
        response = Http1Response(
            status_code=head.status_code,
            headers=list(head.headers.raw_items()),
            stream=body,
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": head.reason},
        )
        response.body = body
        return response

    async def aclose(self) -> None:
        self._pool.close()
