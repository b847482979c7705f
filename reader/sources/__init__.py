"""Byte sources: where an archive's bytes come from (local file, HTTP(S), S3, memory).

Every source is a `ByteSource` (base.py): its reads, and the capabilities its callers ask of it
instead of testing its type (local, mappable, reports_landed, serves_multiple_ranges, ...).

Every remote store is one `HttpSource` (http.py) given a `StorePolicy` (policy.py: what the store
does differently) and an `httpx.Auth` (its signing): its requests and their checks are exchange.py,
its one ranged read ranged.py, the open's tail tail.py, several ranges a request multiget.py.

The HTTP plumbing under them (the HTTP/1.1 client under httpx, proxies, TLS, redirects, retries,
bodies, parallel parts) is transport/, which knows no store. The remote sources (httpx, botocore
and the cloud SDKs) are imported when a remote location is first opened, so reading local archives
does not pay for them at start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import LocationError
from .base import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_TAIL_SIZE,
    LOCAL_TAIL_SIZE,
    ByteSource,
    Checked,
    SourceStats,
    fresh_buffer,
    redact_location,
)
from .local import LocalFileSource
from .location import Location, split_location
from .memory import BytesSource
from .transport.contentrange import ContentRange, parse_content_range
from .transport.options import HttpOptions, S3Settings

if TYPE_CHECKING:
    from .http import HttpSource
    from .transport.tls import verified_context

# scheme -> what it reads; each remote opener is imported when its scheme is first opened
# (the cloud SDKs of gs:// and az:// are extras: pt2serve[gcs], pt2serve[azure])
SCHEMES = {
    "http": "any HTTP(S) server with Range support",
    "https": "any HTTP(S) server with Range support",
    "s3": "s3://bucket/key (AWS S3 and S3-compatible storage)",
    "gs": "gs://bucket/object (Google Cloud Storage)",
    "az": "az://container/blob (Azure Blob Storage)",
    "hf": "hf://[datasets/|spaces/]repo_id[@revision]/path (the Hugging Face Hub)",
    "file": "file:///path (a local file)",
}
REMOTE_SCHEMES = frozenset(SCHEMES) - {"file"}


def is_remote(location: str) -> bool:
    """Whether a location names bytes on another machine (a URL of a remote scheme)."""
    return split_location(location).scheme in REMOTE_SCHEMES


def __getattr__(name: str) -> Any:
    """`HttpSource` (it brings httpx and h11), `make_client` (an httpx client on the transport,
    proxies and TLS trust of every remote read, for requests of one's own) and `verified_context`
    (that TLS trust alone) imported on first use."""
    if name == "HttpSource":
        from .http import HttpSource

        return HttpSource
    if name == "make_client":
        from .http import make_client

        return make_client
    if name == "verified_context":
        from .transport.tls import verified_context

        return verified_context
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def tail_size_for(location: str | os.PathLike[str] | ByteSource) -> int:
    """How much of the end an open reads first, by where the bytes live."""
    if isinstance(location, (str, os.PathLike)):
        remote = is_remote(os.fspath(location))
    else:
        remote = not location.local  # memory sources stand in for remote ones
    return DEFAULT_TAIL_SIZE if remote else LOCAL_TAIL_SIZE


async def open_source(
    location: str | os.PathLike[str],
    *,
    tail_size: int = DEFAULT_TAIL_SIZE,
    http_options: HttpOptions | None = None,
    s3_settings: S3Settings | None = None,
    pinned: Mapping[str, Any] | None = None,
) -> ByteSource:
    """Open what a location names: a local path or a URL of one of SCHEMES.

    Remote sources read the last `tail_size` bytes while opening (one request), so
    the directory read that follows costs nothing more; given `pinned` (what a remote source's
    `pinned()` gave before), they first ask once whether the object is still that version.
    """
    text = os.fspath(location)
    scheme, rest = split_location(text)
    if scheme in ("http", "https"):
        from .blob import is_blob_url, open_blob_url
        from .http import HttpSource

        if is_blob_url(text):  # Azure Blob has its own dialect of range reads (blob.py)
            return await open_blob_url(text, tail_size=tail_size, options=http_options, pinned=pinned)
        return await HttpSource.open(text, tail_size=tail_size, options=http_options, pinned=pinned)
    if scheme == "s3":
        from .s3 import open_s3

        return await open_s3(
            text, tail_size=tail_size, options=http_options, settings=s3_settings, pinned=pinned
        )
    if scheme == "gs":
        from .gcs import open_gcs

        return await open_gcs(text, tail_size=tail_size, options=http_options, pinned=pinned)
    if scheme == "az":
        from .azure import open_azure

        return await open_azure(text, tail_size=tail_size, options=http_options, pinned=pinned)
    if scheme == "hf":
        from .hf import open_hf

        return await open_hf(text, tail_size=tail_size, options=http_options, pinned=pinned)
    if scheme == "file":
        return await LocalFileSource.open(rest)
    if scheme:
        supported = ", ".join(f"{name}://" for name in SCHEMES)
        raise LocationError(
            f"unsupported location scheme {scheme!r} in {redact_location(text)!r}; supported: {supported}"
        )
    return await LocalFileSource.open(text)


__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_TAIL_SIZE",
    "LOCAL_TAIL_SIZE",
    "REMOTE_SCHEMES",
    "SCHEMES",
    "ByteSource",
    "BytesSource",
    "Checked",
    "ContentRange",
    "HttpOptions",
    "HttpSource",
    "LocalFileSource",
    "Location",
    "S3Settings",
    "SourceStats",
    "fresh_buffer",
    "is_remote",
    "make_client",
    "open_source",
    "parse_content_range",
    "redact_location",
    "split_location",
    "tail_size_for",
    "verified_context",
]
