"""Typed errors: every failure the reader reports derives from ReaderError.

Callers (the service, the CLI) map these to statuses and messages, so each
class means one kind of problem and every message names what and where.
"""

from __future__ import annotations


class ReaderError(Exception):
    """Base class of every error pt2serve's reader raises on purpose."""


class ArchiveFormatError(ReaderError):
    """The bytes are not a well-formed ZIP or PT2 archive."""


class TensorNotFound(ReaderError, KeyError):
    """No tensor of that name in the selected model.

    A KeyError, as a missing key of a mapping is, so code written against mappings of tensors
    (safetensors' `safe_open`, state dicts) catches it with `except KeyError`; its message prints
    as written, not quoted as KeyError's would be."""

    __str__ = Exception.__str__


class FileNotFound(ReaderError, LookupError):
    """No file of that name among those the archive carries (data/executorch/)."""


class ModelNotFound(ReaderError, LookupError):
    """No model of that name, or no name given where several models exist."""


class UnsupportedPayload(ReaderError):
    """The entry is listed but its bytes cannot be served as a raw tensor.

    Pickled tensor subclasses, custom objects, symbolic sizes, legacy pickled
    weight files and big-endian archives all end here.
    """


class NoReadableWeights(UnsupportedPayload):
    """Nothing in the archive can be read as raw tensors: an AOTInductor package whose weights
    exist only in compiled code (.so or blob). The message lists the models and artifacts found."""


class SourceError(ReaderError):
    """Reading bytes from the underlying file or server failed."""


class LocationError(SourceError, ValueError):
    """A location that names nothing readable: an unknown scheme or a malformed gs://, az://, hf://
    (the CLI's usage error, exit status 2)."""


class NotCached(SourceError):
    """Offline, and the bytes asked for (or any version of the object) are not in the cache."""


class OriginUnreachable(SourceError):
    """No answer from the origin at all: the connection was refused, the name did not resolve, or
    every attempt timed out. Not an HTTP status (a 403, 404, 412 or 503 is an answer). A cached open
    meeting it may serve the version it has (stale-if-error, docs/cache.md)."""


class HostRefused(SourceError):
    """The caller's `HttpOptions.resolve_host` refused a host before any connection to it: never
    retried (another attempt meets the same rule). The message names the host and the rule."""


class SourceChanged(SourceError):
    """The object changed between reads; mixing versions would give wrong bytes."""


class IntegrityError(ReaderError):
    """Bytes read do not match the archive's CRC-32 or declared size."""
