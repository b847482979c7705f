"""A small HTTP/1.1 server the tests own: byte objects, RFC 9110 single ranges, and an injectable fault plan.

It is written on plain asyncio streams so every byte on the wire is ours to get right or to get wrong on
purpose. Use it as the test double for "a web server / object store", well behaved or not::

    async with FaultServer() as server:
        server.put("/model.pt2", data)
        server.faults.append(Status(503, times=2, headers={"Retry-After": "1"}))
        async with httpx.AsyncClient() as client:
            r = await client.get(server.url("/model.pt2"), headers={"Range": "bytes=0-99"})

Normal behaviour (no fault applies)
-----------------------------------
* GET and HEAD of a known path: 200 with the whole object, ``Content-Length``, ``ETag``, ``Last-Modified``,
  ``Accept-Ranges: bytes``. Other methods: 405 with ``Allow: GET, HEAD``. Unknown path: 404. An object put
  under ``/path?query`` answers a request for exactly that path and query (else the path's object answers).
* ``Range`` (GET only; RFC 9110 defines range handling for GET alone, so HEAD ignores it and answers 200):
  ``bytes=a-b``, ``bytes=a-``, ``bytes=-n``. The end is clipped to the object; a suffix longer than the
  object selects the whole object (206 ``bytes 0-(N-1)/N``). A satisfiable range gets 206 with
  ``Content-Range: bytes a-b/N`` and the exact ``Content-Length``. ``a >= N`` or ``bytes=-0`` gets 416 with
  ``Content-Range: bytes */N``. Only a single range is served: several ranges, an unknown unit or an
  invalid spec (``b < a``, garbage) make the server ignore ``Range`` and answer 200 with the whole body, as
  RFC 9110 section 14.2 allows. An empty object answers a nonzero suffix range with 200 (a 206 cannot
  describe an empty range) and any other range with 416 ``bytes */0``.
* Preconditions, in RFC 9110 section 13.2.2 order: ``If-Match`` (strong comparison, ``*`` matches) failing
  -> 412; else ``If-Unmodified-Since`` failing -> 412; ``If-None-Match`` matching (weak comparison) -> 304;
  else ``If-Modified-Since`` not modified -> 304; ``If-Range`` with a non-matching ETag (strong comparison;
  a weak tag never matches) or date -> the range is ignored and the answer is 200 with the whole body.
* Persistent connections (HTTP/1.1 keep-alive); ``Connection: close`` from the client, and any HTTP/1.0
  request, close the connection after the response. ``Transfer-Encoding: chunked`` only under ``Chunked``.

Faults
------
``server.faults`` is a plain list of ``Fault`` objects. For each request the server walks the list in order;
a fault is *eligible* while its ``times`` budget lasts (``times=None``: forever) and the request matches its
``path``/``method`` filters (and, for some faults, a range condition, see below). Every eligible fault counts
the request; the first eligible fault that has already counted more than ``after`` requests is applied
(``applied`` += 1) and the request is served through it; the rest of the request is normal behaviour.
``IgnoreRange``, ``WrongContentRange`` and ``ShortBody`` only match GETs that carry a ``Range`` header;
``RefuseSuffix`` only matches GETs whose ``Range`` is a single suffix range ``bytes=-n``.

``server.log`` records every request (``RequestRecord``), ``server.errors`` every unexpected exception in the
server (a test can assert it is empty), ``server.delay`` adds latency to every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import hashlib
import itertools
import re
import socket
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, unquote, urlsplit

__all__ = [
    "ChangeObject",
    "Chunked",
    "Drip",
    "DropAfter",
    "Fault",
    "FaultServer",
    "Hang",
    "IgnoreRange",
    "NoContentLength",
    "RefuseSuffix",
    "RequestRecord",
    "ResetConnection",
    "ShortBody",
    "StallAfter",
    "Status",
    "StoredObject",
    "WrongContentRange",
]


# --------------------------------------------------------------------------------------------- faults


@dataclass(kw_only=True)
class Fault:
    """Base of every fault: its budget and filters (keyword-only in every subclass).

    times:  how many requests it is applied to (None: unlimited).
    path:   only requests for this path (None: any path).
    method: only requests with this method, e.g. "GET" (None: any method).
    after:  let the first ``after`` matching requests through untouched.
    seen, applied: counters kept by the server (matching requests counted, requests served through it).
    """

    times: int | None = 1
    path: str | None = None
    method: str | None = None
    after: int = 0
    seen: int = field(default=0, init=False)
    applied: int = field(default=0, init=False)

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.applied >= self.times

    def matches(self, request: _Request) -> bool:
        if self.path is not None and _norm_path(self.path) != request.path:
            return False
        return self.method is None or self.method.upper() == request.method


class _RangedFault(Fault):
    def matches(self, request: _Request) -> bool:
        return super().matches(request) and request.method == "GET" and "range" in request.headers


@dataclass
class Status(Fault):
    """Answer ``code`` with ``headers`` and a small text body (``body`` overrides it); connection kept."""

    code: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None


@dataclass
class DropAfter(Fault):
    """Send the normal headers (true Content-Length) and only ``nbytes`` of the body, then close abruptly.

    rst=False closes with FIN (httpx: RemoteProtocolError, incomplete body); rst=True sends a TCP RST
    (httpx: ReadError, connection reset). Pick ``nbytes`` below the body length or nothing is cut.
    """

    nbytes: int
    rst: bool = False


@dataclass
class IgnoreRange(_RangedFault):
    """Answer a ranged GET with 200 and the whole body (no Content-Range, no Accept-Ranges)."""


@dataclass
class WrongContentRange(_RangedFault):
    """Answer 206 for the asked range moved by ``shift`` (clipped to the object), with its true bytes.

    The Content-Range names the moved range, and ``total`` (if given) replaces the complete length ``/N``.
    Choose a range the shift can move inside the object, else the header may equal what was asked.
    """

    shift: int = 1
    total: int | None = None


@dataclass
class ShortBody(_RangedFault):
    """Answer 206 with the asked Content-Range but Content-Length and body ``missing`` bytes short."""

    missing: int = 1


@dataclass
class Drip(Fault):
    """Send the normal response, the body ``chunk_size`` bytes at a time with ``interval`` s sleeps."""

    chunk_size: int = 1024
    interval: float = 0.01

    @property
    def bytes_per_second(self) -> float:
        return self.chunk_size / self.interval if self.interval > 0 else float("inf")


@dataclass
class Chunked(Fault):
    """Send the normal response with Transfer-Encoding: chunked (``chunk_size`` chunks), no Content-Length."""

    chunk_size: int = 4096


@dataclass
class NoContentLength(Fault):
    """Send the normal response with no Content-Length and no chunking; the body ends at connection close."""


@dataclass
class ChangeObject(Fault):
    """Replace the object (as ``put``) before answering; the request and later ones see the new object."""

    data: bytes
    etag: str | None = None


@dataclass
class RefuseSuffix(Fault):
    """Answer ``code`` (405/416/501 ...) to suffix ranges ``bytes=-n`` only; no Content-Range unless given."""

    code: int = 501
    headers: dict[str, str] = field(default_factory=dict)

    def matches(self, request: _Request) -> bool:
        return super().matches(request) and request.method == "GET" and request.suffix_range


@dataclass
class Hang(Fault):
    """Read the request and say nothing: forever (seconds=None, until the client leaves or the server
    stops), or for ``seconds``, or until ``until`` is set, and then answer normally."""

    seconds: float | None = None
    until: asyncio.Event | None = None


@dataclass
class StallAfter(Fault):
    """Send the normal headers and ``nbytes`` of the body, then stall: forever (seconds=None), or for
    ``seconds`` and then send the rest."""

    nbytes: int
    seconds: float | None = None


@dataclass
class ResetConnection(Fault):
    """Read the request and close the connection without a response: rst=True sends a TCP RST
    (httpx: ReadError), rst=False a FIN (httpx: RemoteProtocolError "Server disconnected ...")."""

    rst: bool = True


# --------------------------------------------------------------------------------------------- records


@dataclass
class StoredObject:
    data: bytes
    etag: str
    last_modified: int  # epoch seconds; strictly increases when a path is replaced

    @property
    def last_modified_http(self) -> str:
        return email.utils.formatdate(self.last_modified, usegmt=True)


@dataclass
class RequestRecord:
    """One request as received, and what was sent back.

    status is None while nothing was answered (and stays None after Hang/ResetConnection);
    body_bytes counts body bytes actually handed to the socket (chunk framing excluded);
    range is the raw Range header (None if absent); fault is the applied fault's class name or None;
    connection numbers the TCP connections (equal numbers: the same persistent connection);
    unanswered_before counts the earlier requests not answered yet when this one arrived (requests in
    flight together).
    """

    method: str
    path: str
    target: str
    headers: dict[str, str]
    connection: int
    range: str | None
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    body_bytes: int = 0
    fault: str | None = None
    unanswered_before: int = 0


# --------------------------------------------------------------------------------------------- internals


@dataclass
class _Request:
    method: str
    target: str
    path: str
    version: str
    headers: dict[str, str]

    @property
    def wants_close(self) -> bool:
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" not in tokens
        return "close" in tokens

    @property
    def suffix_range(self) -> bool:
        specs = _range_specs(self.headers.get("range"))
        return specs is not None and len(specs) == 1 and specs[0][0] is None


@dataclass
class _Response:
    status: int
    headers: list[tuple[str, str]]
    body: bytes | memoryview = b""

    def drop(self, name: str) -> None:
        self.headers = [(k, v) for k, v in self.headers if k.lower() != name.lower()]

    def set(self, name: str, value: str) -> None:
        self.drop(name)
        self.headers.append((name, value))

    def get(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


class _Unsatisfiable:
    pass


_UNSATISFIABLE = _Unsatisfiable()
_SPEC = re.compile(r"(\d*)-(\d*)")
_ETAG = re.compile(r'\s*(W/)?"([^"]*)"\s*(?:,|$)')
_NO_BODY = frozenset({204, 304})


def _norm_path(path: str) -> str:
    return path if path.startswith("/") else "/" + path


def _quote_etag(etag: str) -> str:
    return etag if etag.startswith(('"', 'W/"')) else f'"{etag}"'


def _range_specs(value: str | None) -> list[tuple[int | None, int | None]] | None:
    """The byte-range specs of a Range header, or None when it is absent, not bytes, or invalid."""
    if value is None:
        return None
    unit, sep, rest = value.partition("=")
    if not sep or unit.strip().lower() != "bytes":
        return None
    specs: list[tuple[int | None, int | None]] = []
    for element in rest.split(","):
        element = element.strip()
        if not element:
            continue  # RFC 9110 section 5.6.1: empty list elements are ignored
        m = _SPEC.fullmatch(element)
        if m is None or not (m[1] or m[2]):
            return None
        first = int(m[1]) if m[1] else None
        last = int(m[2]) if m[2] else None
        if first is not None and last is not None and last < first:
            return None
        specs.append((first, last))
    return specs or None


def _resolve_range(value: str | None, size: int) -> tuple[int, int] | _Unsatisfiable | None:
    """(first, last) inclusive for a served single range, _UNSATISFIABLE for 416, None for 200 full."""
    specs = _range_specs(value)
    if specs is None or len(specs) != 1:
        return None
    first, last = specs[0]
    if first is None:  # suffix range
        assert last is not None
        if last == 0:
            return _UNSATISFIABLE
        if size == 0:
            return None
        return max(size - last, 0), size - 1
    if first >= size:
        return _UNSATISFIABLE
    return first, size - 1 if last is None else min(last, size - 1)


def _etags(value: str) -> list[tuple[bool, str]] | None:
    """(weak, opaque) pairs of an entity-tag list, or None if it does not parse."""
    tags, pos = [], 0
    value = value.strip()
    while pos < len(value):
        m = _ETAG.match(value, pos)
        if m is None:
            return None
        tags.append((bool(m[1]), m[2]))
        pos = m.end()
    return tags


def _etag_matches(header: str, etag: str, *, strong: bool) -> bool:
    if header.strip() == "*":
        return True
    current = _etags(etag)
    tags = _etags(header)
    if not current or not tags:
        return False
    weak, opaque = current[0]
    if strong:
        return not weak and (False, opaque) in tags
    return any(o == opaque for _, o in tags)


def _http_date(value: str) -> int | None:
    try:
        return int(email.utils.parsedate_to_datetime(value).timestamp())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _reason(code: int) -> str:
    try:
        return HTTPStatus(code).phrase
    except ValueError:
        return "Status"


def _plain(code: int, headers: Mapping[str, str], body: bytes | None) -> _Response:
    text = f"injected {code} {_reason(code)}\n".encode() if body is None else body
    if code in _NO_BODY or code < 200:
        text = b""
    response = _Response(code, [("Content-Type", "text/plain"), ("Content-Length", str(len(text)))], text)
    for name, value in headers.items():
        response.set(name, value)
    return response


# --------------------------------------------------------------------------------------------- server


class FaultServer:
    """HTTP/1.1 server on 127.0.0.1 (port 0: a free one) serving ``objects`` by path, with ``faults``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, objects: Mapping[str, bytes] | None = None):
        self.host = host
        self.port = port
        self.objects: dict[str, StoredObject] = {}
        self.faults: list[Fault] = []
        self.log: list[RequestRecord] = []
        self.errors: list[BaseException] = []
        self.delay: float = 0.0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._connection_ids = itertools.count(1)
        self._closing = False
        for path, data in (objects or {}).items():
            self.put(path, data)

    # ---- lifecycle

    async def start(self) -> FaultServer:
        self._closing = False
        self._server = await asyncio.start_server(self._serve_connection, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        """Stop listening, cancel every connection handler, close every connection; idempotent."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        await asyncio.sleep(0)  # let transports run their connection_lost callbacks

    async def __aenter__(self) -> FaultServer:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # ---- objects

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + quote(_norm_path(path))

    def put(self, path: str, data: bytes, etag: str | None = None) -> StoredObject:
        """Create or replace an object. Default ETag: '"' + sha1(data)[:16] + '"' (so new bytes, new ETag);
        an unquoted ``etag`` is quoted. Last-Modified is now, and strictly later than the replaced one's."""
        path = _norm_path(path)
        data = bytes(data)
        tag = _quote_etag(etag) if etag is not None else f'"{hashlib.sha1(data).hexdigest()[:16]}"'
        modified = int(time.time())
        if (old := self.objects.get(path)) is not None:
            modified = max(modified, old.last_modified + 1)
        self.objects[path] = stored = StoredObject(data, tag, modified)
        return stored

    def remove(self, path: str) -> None:
        self.objects.pop(_norm_path(path), None)

    def etag(self, path: str) -> str:
        return self.objects[_norm_path(path)].etag

    @property
    def open_connections(self) -> int:
        """Client connections currently open (idle keep-alive ones included)."""
        return len(self._tasks)

    def requests(self, path: str | None = None, method: str | None = None) -> list[RequestRecord]:
        """The log, filtered by path and/or method."""
        return [
            r
            for r in self.log
            if (path is None or r.path == _norm_path(path)) and (method is None or r.method == method.upper())
        ]

    # ---- connection handling

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        connection = next(self._connection_ids)
        try:
            while not self._closing:
                request = await self._read_request(reader, writer)
                if request is None:
                    break
                if not await self._handle(request, connection, reader, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away
        except asyncio.CancelledError:
            # stop() cancelled us. End normally: Python 3.11's start_server callback calls task.exception()
            # on the finished handler task, which raises (and logs an error) for a cancelled task.
            pass
        except Exception as exc:
            self.errors.append(exc)
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> _Request | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None  # clean close between requests (or a truncated head: nothing to answer)
        except asyncio.LimitOverrunError:
            await self._send_simple(writer, 431)
            return None
        lines = head.decode("latin-1").split("\r\n")
        while lines and not lines[0]:
            lines.pop(0)  # RFC 9112 section 2.2: ignore empty lines before the request line
        parts = lines[0].split(" ") if lines else []
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await self._send_simple(writer, 400)
            return None
        method, target, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                await self._send_simple(writer, 400)
                return None
            key = name.lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        if "transfer-encoding" in headers:
            await self._send_simple(writer, 501)
            return None
        length = headers.get("content-length", "0")
        if not length.isdigit():
            await self._send_simple(writer, 400)
            return None
        if int(length):
            await reader.readexactly(int(length))  # request bodies are read and ignored
        path = _norm_path(unquote(urlsplit(target).path))
        return _Request(method.upper(), target, path, version, headers)

    async def _send_simple(self, writer: asyncio.StreamWriter, code: int) -> None:
        response = _plain(code, {"Connection": "close"}, f"{code} {_reason(code)}\n".encode())
        writer.write(self._head(response))
        writer.write(response.body)
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    def _pick_fault(self, request: _Request) -> Fault | None:
        chosen = None
        for fault in list(self.faults):
            if fault.exhausted or not fault.matches(request):
                continue
            fault.seen += 1
            if chosen is None and fault.seen > fault.after:
                chosen = fault
                fault.applied += 1
        return chosen

    async def _handle(
        self, request: _Request, connection: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; True to keep the connection for the next one."""
        record = RequestRecord(
            method=request.method,
            path=request.path,
            target=request.target,
            headers=dict(request.headers),
            connection=connection,
            range=request.headers.get("range"),
            unanswered_before=sum(1 for earlier in self.log if earlier.status is None),
        )
        self.log.append(record)
        fault = self._pick_fault(request)
        record.fault = type(fault).__name__ if fault is not None else None
        if self.delay > 0:
            await asyncio.sleep(self.delay)
        close = request.wants_close
        send_body = request.method != "HEAD"

        if isinstance(fault, ResetConnection):
            self._abort(writer, rst=fault.rst)
            return False
        if isinstance(fault, Hang) and fault.until is not None:
            await fault.until.wait()
        elif isinstance(fault, Hang):
            if fault.seconds is None:
                await self._wait_for_eof(reader)
                return False
            await asyncio.sleep(fault.seconds)
        if isinstance(fault, ChangeObject):
            self.put(fault.path or request.path, fault.data, fault.etag)

        if isinstance(fault, Status):
            response = _plain(fault.code, fault.headers, fault.body)
        elif isinstance(fault, RefuseSuffix):
            response = _plain(fault.code, fault.headers, None)
        else:
            response = self._normal(request, ignore_range=isinstance(fault, IgnoreRange))
            if isinstance(fault, IgnoreRange):
                response.drop("Accept-Ranges")
            elif isinstance(fault, WrongContentRange):
                response = self._wrong_range(request, response, fault)
            elif isinstance(fault, ShortBody) and response.status == 206:
                keep = max(len(response.body) - fault.missing, 0)
                response.body = response.body[:keep]
                response.set("Content-Length", str(keep))
        if response.status in _NO_BODY or response.status < 200:
            send_body = False
        body = response.body if send_body else b""

        if isinstance(fault, DropAfter):
            await self._write_head(writer, record, response, close=False)
            await self._write_body(writer, record, body[: fault.nbytes])
            self._abort(writer, rst=fault.rst)
            return False
        if isinstance(fault, StallAfter):
            await self._write_head(writer, record, response, close=close)
            await self._write_body(writer, record, body[: fault.nbytes])
            if fault.seconds is None:
                await self._wait_for_eof(reader)
                return False
            await asyncio.sleep(fault.seconds)
            await self._write_body(writer, record, body[fault.nbytes :])
            return not close
        if isinstance(fault, Chunked) and response.status not in _NO_BODY:
            response.drop("Content-Length")
            response.set("Transfer-Encoding", "chunked")
            await self._write_head(writer, record, response, close=close)
            if send_body:
                for start in range(0, len(body), max(fault.chunk_size, 1)):
                    chunk = body[start : start + fault.chunk_size]
                    writer.write(f"{len(chunk):x}\r\n".encode())
                    await self._write_body(writer, record, chunk)
                    writer.write(b"\r\n")
                writer.write(b"0\r\n\r\n")
                await writer.drain()
            return not close
        if isinstance(fault, NoContentLength):
            response.drop("Content-Length")
            await self._write_head(writer, record, response, close=True)
            await self._write_body(writer, record, body)
            return False
        if isinstance(fault, Drip):
            await self._write_head(writer, record, response, close=close)
            step = max(fault.chunk_size, 1)
            for start in range(0, len(body), step):
                if start:
                    await asyncio.sleep(fault.interval)
                await self._write_body(writer, record, body[start : start + step])
            return not close
        await self._write_head(writer, record, response, close=close)
        await self._write_body(writer, record, body)
        return not close

    def _normal(self, request: _Request, *, ignore_range: bool = False) -> _Response:
        """The correct answer to ``request`` (body included even for HEAD; the caller omits it)."""
        if request.method not in ("GET", "HEAD"):
            return _plain(405, {"Allow": "GET, HEAD"}, None)
        query = urlsplit(request.target).query
        obj = (query and self.objects.get(f"{request.path}?{query}")) or self.objects.get(request.path)
        if obj is None:
            return _plain(404, {}, b"not found\n")
        h = request.headers
        validators = [("ETag", obj.etag), ("Last-Modified", obj.last_modified_http)]
        if "if-match" in h:
            if not _etag_matches(h["if-match"], obj.etag, strong=True):
                return _plain(412, {}, None)
        elif "if-unmodified-since" in h:
            date = _http_date(h["if-unmodified-since"])
            if date is not None and obj.last_modified > date:
                return _plain(412, {}, None)
        if "if-none-match" in h:
            if _etag_matches(h["if-none-match"], obj.etag, strong=False):
                return _Response(304, list(validators))
        elif "if-modified-since" in h:
            date = _http_date(h["if-modified-since"])
            if date is not None and obj.last_modified <= date:
                return _Response(304, list(validators))

        size = len(obj.data)
        value = h.get("range") if request.method == "GET" and not ignore_range else None
        if value is not None and "if-range" in h and not self._if_range_holds(h["if-range"], obj):
            value = None
        resolved = _resolve_range(value, size)
        headers = [("Content-Type", "application/octet-stream"), *validators, ("Accept-Ranges", "bytes")]
        if resolved is _UNSATISFIABLE:
            return _Response(416, [*headers, ("Content-Range", f"bytes */{size}"), ("Content-Length", "0")])
        if resolved is None:
            return _Response(200, [*headers, ("Content-Length", str(size))], memoryview(obj.data))
        assert isinstance(resolved, tuple)
        first, last = resolved
        return _Response(
            206,
            [
                *headers,
                ("Content-Range", f"bytes {first}-{last}/{size}"),
                ("Content-Length", str(last - first + 1)),
            ],
            memoryview(obj.data)[first : last + 1],
        )

    @staticmethod
    def _if_range_holds(value: str, obj: StoredObject) -> bool:
        value = value.strip()
        if value.startswith(('"', "W/")):
            tags = _etags(value)
            current = _etags(obj.etag)
            if not tags or not current or len(tags) != 1:
                return False
            return not tags[0][0] and not current[0][0] and tags[0][1] == current[0][1]
        return _http_date(value) == obj.last_modified

    def _wrong_range(self, request: _Request, response: _Response, fault: WrongContentRange) -> _Response:
        if response.status not in (200, 206):
            return response
        obj = self.objects[request.path]
        size = len(obj.data)
        if size == 0:
            return response
        first, last = 0, size - 1
        if response.status == 206:  # the range actually asked, as the correct answer states it
            spec = (response.get("Content-Range") or "").removeprefix("bytes ").partition("/")[0]
            first, last = (int(x) for x in spec.split("-"))
        first = min(max(first + fault.shift, 0), size - 1)
        last = min(max(last + fault.shift, first), size - 1)
        total = size if fault.total is None else fault.total
        response.status = 206
        response.body = memoryview(obj.data)[first : last + 1]
        response.set("Content-Range", f"bytes {first}-{last}/{total}")
        response.set("Content-Length", str(last - first + 1))
        return response

    # ---- writing

    @staticmethod
    def _head(response: _Response, *, close: bool = True) -> bytes:
        lines = [f"HTTP/1.1 {response.status} {_reason(response.status)}"]
        lines.append(f"Date: {email.utils.formatdate(usegmt=True)}")
        lines.append("Server: faultserver")
        lines += [f"{name}: {value}" for name, value in response.headers]
        if close and response.get("Connection") is None:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _write_head(
        self, writer: asyncio.StreamWriter, record: RequestRecord, response: _Response, *, close: bool
    ) -> None:
        record.status = response.status
        record.response_headers = {name.lower(): value for name, value in response.headers}
        if close:
            record.response_headers.setdefault("connection", "close")
        writer.write(self._head(response, close=close))
        await writer.drain()

    @staticmethod
    async def _write_body(
        writer: asyncio.StreamWriter, record: RequestRecord, data: bytes | memoryview
    ) -> None:
        if data:
            writer.write(data)
            record.body_bytes += len(data)
            await writer.drain()

    @staticmethod
    def _abort(writer: asyncio.StreamWriter, *, rst: bool) -> None:
        if rst:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    @staticmethod
    async def _wait_for_eof(reader: asyncio.StreamReader) -> None:
        while await reader.read(65536):
            pass


def data_ranges(server: FaultServer) -> list[tuple[int, int]]:
    """The byte ranges of `server`'s object /blob asked by data requests (the open's suffix range left
    out), in arrival order."""
    found = []
    for record in server.requests("/blob", "GET"):
        match = re.fullmatch(r"bytes=(\d+)-(\d+)", record.range or "")
        if match:
            found.append((int(match.group(1)), int(match.group(2)) + 1))
    return found
