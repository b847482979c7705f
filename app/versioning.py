"""Versions in URLs: `/archives/{id}@{version}/...` is immutable; everything else revalidates.

A URL that names a version (`demo@3f2a…`) always answers with the same bytes, so
every cache may keep it for a year (`immutable`; `private` when the request carried
credentials, app/caching.py). The unversioned routes answer
`Cache-Control: no-cache` (caches must revalidate; a matching ETag gets a 304) and
name the versioned URL of what they sent in `Content-Location`; `?redirect=1`
answers with a 307 to it instead. A tensor's ETag is derived from its SHA-256,
layout and output format, not from the archive, so a tensor that did not change
keeps its ETag (and its 304s) across versions.
"""

from __future__ import annotations

import functools
import hashlib
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson
from starlette.requests import Request
from starlette.responses import Response

import reader
from reader.bodies import TensorBytes

from .caching import (
    IMMUTABLE,
    IMMUTABLE_PRIVATE,
    NOSNIFF,
    REVALIDATE,
    STALE_HEADER,
    credentialed,
    stale_value,
    text_response,
)
from .fields import Fields
from .registry import Served

PINNED_HEADERS = Fields({"cache-control": IMMUTABLE, **NOSNIFF})
PINNED_PRIVATE_HEADERS = Fields({"cache-control": IMMUTABLE_PRIVATE, **NOSNIFF})  # asked with credentials
PATH_SAFE = "/:@!$&'()*+,;=-._~"  # RFC 3986 pchar and "/": what a path needs no encoding for
REDIRECT_SWITCH = "redirect"  # ?redirect=1 on an unversioned URL: 307 to the versioned one


class PinRedirect(Exception):
    """Answer with a redirect to the versioned URL (the unversioned URL asked for one)."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


def pinned_url(request: Request, archive_id: str, version: str) -> str:
    """This request's path and query with the archive pinned to `version` (the redirect switch
    left out): `/tensors/x/data` → `/archives/{id}@{version}/tensors/x/data`."""
    # percent-encoded (a URI reference, RFC 9110 §8.7): the decoded path may hold any character
    path = urllib.parse.quote(request.scope["path"], safe=PATH_SAFE)
    pinned = f"/archives/{_quoted(archive_id)}@{version}"
    if path.startswith("/archives/"):
        rest = path[len("/archives/") :].split("/", 1)
        path = pinned + ("/" + rest[1] if len(rest) > 1 else "")
    else:
        path = pinned + path
    if not request.scope["query_string"]:  # the usual case: no query to carry over
        return path
    query = [(key, value) for key, value in request.query_params.multi_items() if key != REDIRECT_SWITCH]
    return path + ("?" + urllib.parse.urlencode(query) if query else "")


@functools.lru_cache(maxsize=1024)
def _quoted(text: str) -> str:
    """A path segment, percent-encoded (archive ids, model names: few, asked for on every request)."""
    return urllib.parse.quote(text, safe="")


def caching_headers(request: Request, served: Served) -> Fields:
    """Cache-Control for a response from `served`, and where an unversioned response's
    versioned twin lives. Raises PinRedirect when the request asks to be sent there.

    Read-only `Fields`: those of a path without a query are made (and encoded) once per archive
    version (the common unversioned request; queries are not, so no client can fill the memo)."""
    scope = request.scope
    if served.pinned:
        return PINNED_PRIVATE_HEADERS if credentialed(scope) else PINNED_HEADERS
    stale = served.archive.stale
    if stale is not None:  # rare, and its age moves: made per answer, not memoized
        fields = dict(_unpinned(pinned_url(request, served.id, served.version)))
        fields[STALE_HEADER] = stale_value(served.version, stale.age)
        return Fields(fields)
    if not scope["query_string"]:
        key = ("caching", scope["path"])
        known = served.opened.prepared.get(key)
        if known is None:
            known = served.opened.remember(key, _unpinned(pinned_url(request, served.id, served.version)))
        return known
    pinned = pinned_url(request, served.id, served.version)
    asked = REDIRECT_SWITCH.encode() in scope["query_string"]
    if asked and request.query_params.get(REDIRECT_SWITCH, "").lower() in ("1", "true", "yes"):
        raise PinRedirect(pinned)
    return _unpinned(pinned)


def _unpinned(pinned: str) -> Fields:
    return Fields({"cache-control": REVALIDATE, "content-location": pinned, **NOSNIFF})


def data_url(archive_id: str, version: str, info: reader.TensorInfo) -> str:
    """The versioned URL of a tensor's bytes (raw, memory order)."""
    name = urllib.parse.quote(info.name, safe="")
    return f"/archives/{_quoted(archive_id)}@{version}/tensors/{name}/data?model={_quoted(info.model)}"


def tensor_etag(digest: bytes, tensor: TensorBytes, fmt: str) -> str:
    """A strong ETag from what the representation is: its bytes' SHA-256, how to read them
    (dtype, shape, dimension order) and the format. Not the archive's identity."""
    geometry = tensor.geometry
    described = f"{geometry.dtype}|{geometry.sizes}|{tensor.dim_order}|{tensor.order}|{fmt}".encode()
    return f'"{hashlib.blake2b(digest + described, digest_size=16).hexdigest()}"'


def version_etag(served: Served, *parts: str) -> str:
    """A strong ETag for bytes fixed by the archive version (changes with every version)."""
    named = "\0".join((served.id, served.version, *parts)).encode()
    return f'"{hashlib.blake2b(named, digest_size=16).hexdigest()}"'


@dataclass(frozen=True)
class TaggedJson:
    """A JSON body, the ETag of its bytes, and its encoded forms once made (app/encoding.py)."""

    body: bytes
    etag: str
    encoded: dict[str, bytes] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, content: object) -> TaggedJson:
        body = orjson.dumps(content)
        return cls(body, f'"{hashlib.blake2b(body, digest_size=16).hexdigest()}"')


def json_etag_response(request: Request, content: object, headers: Mapping[str, str]) -> Response:
    """JSON with an ETag of its own bytes (`content` may come tagged), in the coding the client
    prefers: a matching If-None-Match gets a 304."""
    tagged = content if isinstance(content, TaggedJson) else TaggedJson.of(content)
    return text_response(
        request, tagged.body, tagged.etag, "application/json", headers, encoded=tagged.encoded
    )
