"""Byte sources: where an archive's bytes come from."""

from __future__ import annotations

import os

from ..errors import SourceError
from .base import DEFAULT_CHUNK_SIZE, ByteSource, SourceStats
from .local import LocalFileSource
from .memory import BytesSource


async def open_source(location: str | os.PathLike[str]) -> ByteSource:
    """Open the source a location names: a local path (URLs come with remote sources)."""
    text = os.fspath(location)
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme in ("http", "https", "s3"):
        raise SourceError(f"{scheme}:// locations are not supported yet; pass a local path")
    if scheme == "file":
        text = text[len("file://") :]
    return await LocalFileSource.open(text)


__all__ = ["DEFAULT_CHUNK_SIZE", "ByteSource", "BytesSource", "LocalFileSource", "SourceStats", "open_source"]
