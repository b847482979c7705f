"""Byte sources: where an archive's bytes come from (local file, HTTP(S), S3, memory)."""

from __future__ import annotations

import os

from ..errors import SourceError
from .base import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_TAIL_SIZE,
    LOCAL_TAIL_SIZE,
    ByteSource,
    SourceStats,
    redact_location,
)
from .http import HttpOptions, HttpSource
from .local import LocalFileSource
from .memory import BytesSource
from .s3 import S3Settings, open_s3


def _scheme(location: str) -> str:
    return location.split("://", 1)[0].lower() if "://" in location else ""


def tail_size_for(location: str | os.PathLike[str] | ByteSource) -> int:
    """How much of the end an open reads first, by where the bytes live."""
    if isinstance(location, (str, os.PathLike)):
        remote = _scheme(os.fspath(location)) in ("http", "https", "s3")
    else:
        remote = not isinstance(location, LocalFileSource)  # memory sources stand in for remote ones
    return DEFAULT_TAIL_SIZE if remote else LOCAL_TAIL_SIZE


async def open_source(
    location: str | os.PathLike[str],
    *,
    tail_size: int = DEFAULT_TAIL_SIZE,
    http_options: HttpOptions | None = None,
    s3_settings: S3Settings | None = None,
) -> ByteSource:
    """Open what a location names: http(s):// URL, s3://bucket/key, file:// URL or local path.

    Remote sources read the last `tail_size` bytes while opening (one request), so
    the directory read that follows costs nothing more.
    """
    text = os.fspath(location)
    scheme = _scheme(text)
    if scheme in ("http", "https"):
        return await HttpSource.open(text, tail_size=tail_size, options=http_options)
    if scheme == "s3":
        return await open_s3(text, tail_size=tail_size, options=http_options, settings=s3_settings)
    if scheme == "file":
        return await LocalFileSource.open(text[len("file://") :])
    if scheme:
        raise SourceError(f"unsupported location scheme {scheme!r} in {redact_location(text)!r}")
    return await LocalFileSource.open(text)


__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_TAIL_SIZE",
    "LOCAL_TAIL_SIZE",
    "ByteSource",
    "BytesSource",
    "HttpOptions",
    "HttpSource",
    "LocalFileSource",
    "S3Settings",
    "SourceStats",
    "open_source",
    "redact_location",
    "tail_size_for",
]
