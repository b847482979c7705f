"""An archive's version: a short string naming the bytes it was opened on.

Derived only from what identifies the object's bytes at its origin, so every
replica that reads the same object, before or after a restart, names it alike:
a remote object's strong ETag (or Last-Modified) and size; a local file's size
and modification time. (The inode is left out: it differs between machines
that hold copies of one file.) Hashed, so it fits in a URL path segment.
"""

from __future__ import annotations

import hashlib
import re

from .sources import ByteSource

VERSION_LENGTH = 16  # hex digits: 64 bits, ample for the versions of one location
VERSION_PATTERN = re.compile(f"[0-9a-f]{{{VERSION_LENGTH}}}")


def version_basis(source: ByteSource) -> str:
    """What names the source's bytes; equal for every reader of the same object."""
    modified_ns = getattr(source, "modified_ns", None)  # a local file's
    if modified_ns is not None:
        return f"file:{source.size:x}:{modified_ns:x}"
    etag = getattr(source, "etag", None)
    if etag and not etag.startswith("W/"):
        return f"etag:{etag}:{source.size}"
    last_modified = getattr(source, "last_modified", None)
    if last_modified:
        return f"modified:{last_modified}:{source.size}"
    return f"identity:{source.identity}"


def source_version(source: ByteSource) -> str:
    """The version string of the bytes `source` was opened on (16 hex digits)."""
    digest = hashlib.sha256(version_basis(source).encode()).hexdigest()
    return digest[:VERSION_LENGTH]


def is_version(text: str) -> bool:
    return VERSION_PATTERN.fullmatch(text) is not None


__all__ = [
    "is_version",
    "source_version",
    "version_basis",
]
