"""The one HTTP/1.1 client under httpx: a transport (transport.py) over pooled connections
(pool.py: straight, or through a proxy's CONNECT tunnel; TLS from tls.py; `resolve_host`). Built
as h11 is: what the bytes mean is sans-IO (framing.py: the request, the head, where the body ends;
inbox.py: each read into buffers or straight into the caller's memory, typed chunks queued), and
connection.py is the asyncio protocol around it (flow control, waits, the socket's read mark:
readmark.py); the body as its consumer takes it (stream.py), a long streamed body on a thread of
its own (receiver.py)."""

from .stream import BodyStream
from .transport import Http1Response, Http1Transport

__all__ = ["BodyStream", "Http1Response", "Http1Transport"]
