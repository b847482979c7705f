"""An httpx transport whose bodies come from aiohttp: bulk bytes without Python work per 64 KiB.

httpx stays the client API (auth flows such as SigV4, redirects, timeouts, HTTP/2 on request);
only the wire moves. httpx's own HTTP/1.1 path (httpcore + h11) parses in Python and hands out
64 KiB per read, which measured 0.32x curl on loopback. aiohttp parses with llhttp (C) and its
`readchunk()` hands out each socket read as it arrived (up to 256 KiB, no copy), so a 1 GB/s stream
costs a few thousand Python steps a second instead of tens of thousands.

Why not the `httpx-aiohttp` package: its body chunk is a fixed 16 KiB (`iter_chunked`, a copy
per chunk: 0.29x curl as shipped, 0.81x patched to 1 MiB), it maps every connection error to
`ConnectTimeout`, and it lets aiohttp requote URLs (which breaks SigV4 signatures of keys with
reserved characters). This module is the ~100 lines that matter, with none of those.

A GET of one explicit range of at least 1 MiB goes to bulk.py instead: its body is received
straight into the buffers that are handed on, over connections of its own (kept alive in a pool).

Errors keep httpx's types (`httpx.ConnectError`, `ReadError`, `ReadTimeout`, ...), so the
retry logic above does not know which transport ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Iterator

import aiohttp
import httpx
from yarl import URL

from . import bulk
from .options import ResolveHost
from .proxies import Proxy
from .resolving import HookResolver, check_literal


@contextlib.contextmanager
def _httpx_errors() -> Iterator[None]:
    """aiohttp's exceptions as the httpx.TransportError subclasses the retry logic expects."""
    try:
        yield
    except aiohttp.ClientPayloadError as exc:  # body cut (short, reset, bad chunking)
        raise httpx.ReadError(str(exc)) from exc
    except aiohttp.ServerDisconnectedError as exc:
        raise httpx.RemoteProtocolError(str(exc) or "server disconnected") from exc
    except aiohttp.ClientConnectorError as exc:
        raise httpx.ConnectError(str(exc)) from exc
    except aiohttp.ServerTimeoutError as exc:
        raise httpx.ReadTimeout(str(exc) or "read timed out") from exc
    except aiohttp.ClientHttpProxyError as exc:  # the proxy refused the tunnel (407, 403, ...)
        raise httpx.ProxyError(f"CONNECT answered {exc.status} {exc.message}") from exc
    except aiohttp.ClientResponseError as exc:  # a response aiohttp could not parse
        raise httpx.RemoteProtocolError(str(exc)) from exc
    except (aiohttp.ClientError, ConnectionError) as exc:
        raise httpx.ReadError(f"{type(exc).__name__}: {exc}") from exc
    except TimeoutError as exc:
        raise httpx.ReadTimeout("timed out") from exc


class _Body(httpx.AsyncByteStream):
    """A response body as aiohttp read it from the socket; closing an unfinished body drops
    the connection (cheaper than draining it), a finished one goes back to the pool."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        content = self._response.content
        try:
            while True:
                # one socket read per call: readany() would join everything buffered (a copy)
                chunk, end_of_http_chunk = await content.readchunk()
                if chunk:
                    yield chunk
                elif not end_of_http_chunk or content.at_eof():
                    # at_eof: a body-less answer's reader is aiohttp's one shared EmptyStreamReader,
                    # which says (b"", True) forever once anything has read it (a HEAD's 302, read
                    # by httpx as it follows the redirect, looped here)
                    return
        except (aiohttp.ClientError, ConnectionError, TimeoutError):
            # aiohttp drops what it had buffered when the connection fails: hand that out
            # first, so a resume starts after the last byte that really arrived
            buffered = getattr(content, "_buffer", None) or ()
            while buffered:
                yield buffered.popleft()
            with _httpx_errors():
                raise

    async def aclose(self) -> None:
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """Sends httpx requests over one aiohttp session (HTTP/1.1, pooled keep-alive connections)."""

    def __init__(
        self,
        *,
        verify: ssl.SSLContext,
        proxy: Proxy | None = None,
        max_connections: int = 100,
        receive_thread: bool = True,
        resolve_host: ResolveHost | None = None,
    ) -> None:
        self._verify = verify
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._bulk = bulk.Pool(verify, proxy, receive_thread=receive_thread, resolve_host=resolve_host)
        self._resolve_host = resolve_host
        self._via_proxy = proxy is not None
        # aiohttp tunnels https through `proxy` with CONNECT (sending proxy_headers), and sends
        # http to it in absolute form, where the credentials must be among the request's headers
        self._proxy = {} if proxy is None else {"proxy": proxy.url, "proxy_headers": proxy.headers or None}
        self._proxy_headers = [] if proxy is None else list(proxy.headers.items())

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:  # made on first use, inside the running loop
            # the hook resolves the hosts connected to (through a proxy: the proxy's, asked as is)
            hooked = self._resolve_host is not None and not self._via_proxy
            resolver = {"resolver": HookResolver(self._resolve_host)} if hooked else {}  # type: ignore[arg-type]
            connector = aiohttp.TCPConnector(limit=self._max_connections, ssl=self._verify, **resolver)
            self._session = aiohttp.ClientSession(
                connector=connector,
                read_bufsize=bulk.READ_AHEAD,  # aiohttp's flow-control high-water mark
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept"),
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme not in ("http", "https"):  # a redirect elsewhere: as httpcore says it
            raise httpx.UnsupportedProtocol(f"cannot follow a redirect to a {request.url.scheme}:// URL")
        if bulk.wants(request):  # a big range: straight into the buffers handed on (bulk.py)
            return await self._bulk.send(request)
        if self._resolve_host is not None:  # hosts aiohttp's resolver does not see (resolving.py)
            port = request.url.port or (443 if request.url.scheme == "https" else 80)
            if self._via_proxy:
                await self._resolve_host(request.url.host, port)
            else:
                await check_literal(self._resolve_host, request.url.host, port)
        timeout = request.extensions.get("timeout", {})
        # read, not `request.content`: the request httpx builds to follow a redirect is unread
        body = await request.aread() or None
        url = request.url
        if url.userinfo:  # httpx already turned it into an Authorization header
            url = url.copy_with(userinfo=b"")
        headers = list(request.headers.multi_items())
        if self._proxy_headers and url.scheme == "http":
            headers += self._proxy_headers
        with _httpx_errors():
            response = await self._get_session().request(
                request.method,
                URL(str(url), encoded=True),  # as httpx built (and SigV4 signed) it
                headers=headers,
                data=body,
                allow_redirects=False,  # httpx follows them (and re-runs auth)
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=timeout.get("connect"), sock_read=timeout.get("read")
                ),
                server_hostname=bulk.sni_hostname(request),
                **self._proxy,
            )
        return httpx.Response(
            status_code=response.status,
            headers=list(response.raw_headers),
            stream=_Body(response),
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": (response.reason or "").encode()},
        )

    async def aclose(self) -> None:
        self._bulk.close()
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
            await asyncio.sleep(0)  # let aiohttp's connection-lost callbacks run
