"""Pulling from a pt2serve server: its manifest, then each tensor's versioned data URL.

Downloads resume with `Range` (the URL names a version, so its bytes cannot have changed),
are checked against the manifest's SHA-256 (and the server's `Repr-Digest`), and wrong
bytes are dropped, never resumed from.
"""

from __future__ import annotations

import base64
import contextlib
import os
import urllib.parse
from collections.abc import Sequence

import httpx

import reader
from reader.sources import parse_content_range

from .mirror import Mirror
from .update import Advance, Entry, Manifest

ATTEMPTS = 3  # per tensor: a cut connection resumes, a digest mismatch starts over once


def manifest_url(url: str, model: str | None, prefix: str | None, names: Sequence[str] | None) -> str:
    """The manifest URL of a served archive, with the selection as query parameters."""
    parts = urllib.parse.urlsplit(url)
    path = parts.path.rstrip("/")
    if not path.endswith("/manifest"):
        path += "/manifest"
    query = urllib.parse.parse_qsl(parts.query)
    query += [("model", model)] if model else []
    query += [("prefix", prefix)] if prefix else []
    query += [("name", name) for name in names or ()]
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, urllib.parse.urlencode(query), ""))


class FromServer:
    """A pt2serve server: manifest and versioned data URLs over HTTP."""

    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client = client
        self.url = url
        self.fetched: dict[str, str] = {}  # nothing is fetched while reading the manifest
        self.bytes_received = 0

    async def manifest(self, model: str | None, prefix: str | None, names: Sequence[str] | None) -> Manifest:
        url = manifest_url(self.url, model, prefix, names)
        response = await self._send("GET", url)
        if response.status_code != 200:
            raise reader.SourceError(f"{url}: {describe(response)}")
        manifest = response.json()
        for entry in manifest["tensors"]:
            if entry.get("url"):
                entry["url"] = urllib.parse.urljoin(url, entry["url"])
        return manifest

    async def fetch(self, mirror: Mirror, entry: Entry, advance: Advance) -> str:
        partial = mirror.partial_path(entry["sha256"])
        for attempt in range(ATTEMPTS):
            try:
                await self._download(entry, partial, advance)
            except (httpx.TransportError, reader.SourceError) as exc:
                if attempt == ATTEMPTS - 1:
                    raise reader.SourceError(f"{entry['url']}: {exc}") from None
                continue
            if mirror.verified(partial, entry["sha256"], entry["nbytes"]):
                return mirror.finish_download(partial, entry["sha256"])
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)  # wrong bytes: never kept, never resumed from
            if attempt == ATTEMPTS - 1:
                raise reader.IntegrityError(f"{entry['url']}: the bytes do not match the manifest's SHA-256")
        raise AssertionError("unreachable")

    async def _download(self, entry: Entry, partial: str, advance: Advance) -> None:
        have = os.path.getsize(partial) if os.path.exists(partial) else 0
        if have == entry["nbytes"] and os.path.exists(partial):
            return  # complete already (an earlier run stopped before moving it): verified next
        if have > entry["nbytes"]:
            have = 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        async with self.client.stream("GET", entry["url"], headers=headers) as response:
            holds = parse_content_range(response.headers.get("content-range"))
            if response.status_code == 206 and holds is not None and holds.first == have:
                mode = "ab"
            elif response.status_code == 200:
                mode, have = "wb", 0
            else:
                await response.aread()
                raise reader.SourceError(f"{entry['url']}: {describe(response)}")
            check_repr_digest(response, entry)
            if have:
                advance(have)
            with open(partial, mode) as out:
                async for chunk in response.aiter_raw():
                    out.write(chunk)
                    self.bytes_received += len(chunk)
                    advance(len(chunk))

    async def _send(self, method: str, url: str) -> httpx.Response:
        try:
            return await self.client.request(method, url)
        except httpx.HTTPError as exc:
            raise reader.SourceError(f"{url}: {exc}") from None


def check_repr_digest(response: httpx.Response, entry: Entry) -> None:
    """A server that states another digest than its manifest is serving other bytes: stop early."""
    field_value = response.headers.get("repr-digest")
    if field_value and field_value.startswith("sha-256=:"):
        stated = base64.b64decode(field_value[len("sha-256=:") :].rstrip(":")).hex()
        if stated != entry["sha256"]:
            raise reader.IntegrityError(
                f"{entry['url']}: Repr-Digest {stated} is not the manifest's {entry['sha256']}"
            )


def describe(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return f"HTTP {response.status_code} {error['code']}: {error['message']}"
    except Exception:
        return f"HTTP {response.status_code}"
