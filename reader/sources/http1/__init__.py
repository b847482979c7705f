"""The one HTTP/1.1 client under httpx: a transport (transport.py) over pooled connections
(pool.py: straight, or through a proxy's CONNECT tunnel; TLS from tls.py; `resolve_host`), each
exchange's head parsed by h11 and its body received into buffers or straight into the caller's
memory (connection.py, stream.py), a long streamed body on a thread of its own (receiver.py)."""

from .stream import BodyStream
from .transport import Http1Response, Http1Transport

__all__ = ["BodyStream", "Http1Response", "Http1Transport"]
