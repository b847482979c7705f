"""`pull`: mirror an archive version into a directory, fetching only tensors whose digest changed.

From a pt2serve server (URL = an archive's base URL `http://host/archives/{id}`, or its
`/manifest` URL) the manifest names every tensor's SHA-256 and versioned data URL;
straight from an archive (a path, an `s3://` URI or an `http(s)://…/x.pt2` URL) the
same reader computes the digests while it streams the bytes. Every byte written is
checked against its digest, partial downloads resume, and the directory switches to
the new version in one rename (see app/mirror.py for the layout and the guarantees).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import hashlib
import os
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, aclosing
from dataclasses import dataclass, field
from typing import Any

import httpx

import reader
from reader.digests import Digests, tensor_key
from reader.manifest import build_manifest, select_tensors
from reader.sources import HttpOptions
from reader.versions import source_version

from .mirror import Mirror, tensor_file

FETCH_CONCURRENCY = 4
ATTEMPTS = 3  # per tensor: a cut connection resumes, a digest mismatch starts over once
Advance = Callable[[int], None]
ProgressFactory = Callable[[int], AbstractContextManager[Advance]]


@dataclass
class PullReport:
    """What a pull did. `bytes_fetched` counts tensor bytes received over the network."""

    version: str
    directory: str
    tensors: int = 0
    fetched: int = 0
    reused: int = 0
    bytes_fetched: int = 0
    bytes_reused: int = 0
    switched: bool = False
    skipped: list[str] = field(default_factory=list)


def is_served_url(url: str) -> bool:
    """A pt2serve archive URL (or manifest URL), as opposed to an archive file itself."""
    parts = urllib.parse.urlsplit(url)
    return parts.scheme in ("http", "https") and not parts.path.endswith(".pt2")


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


async def pull(
    url: str,
    directory: str | os.PathLike[str],
    *,
    model: str | None = None,
    prefix: str | None = None,
    names: Sequence[str] | None = None,
    progress: ProgressFactory | None = None,
    http_options: HttpOptions | None = None,
) -> PullReport:
    """Bring `directory` to the version of the archive at `url` (see the module docstring).

    Raises reader.SourceError (unreachable, HTTP errors), reader.IntegrityError (bytes
    that do not match their digest twice over) or another reader.ReaderError.
    """
    mirror = Mirror(directory)
    with _locked(mirror):
        if is_served_url(url):
            async with httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=10.0)) as client:
                target = _Served(client, url)
                manifest = await target.manifest(model, prefix, names)
                return await _update(mirror, manifest, target, progress)
        async with reader.open_archive(url, http_options=http_options) as archive:
            target = _Direct(archive, mirror)
            manifest = await target.manifest(model, prefix, names)
            return await _update(mirror, manifest, target, progress)


async def _update(
    mirror: Mirror, manifest: dict[str, Any], target: _Served | _Direct, progress: ProgressFactory | None
) -> PullReport:
    """Fetch what the mirror lacks (verified), then switch to `manifest`'s version unless
    the current version already is exactly that."""
    current, current_dir = mirror.current_manifest(), mirror.current_dir()
    report = PullReport(version=manifest["version"], directory=current_dir or "")
    known = mirror.known_files()
    sources: dict[str, str] = {}
    missing: dict[str, list[dict[str, Any]]] = {}  # by digest: tied tensors are fetched once
    checked: dict[str, bool] = {}  # path → verified (tied tensors share a file)
    for entry in manifest["tensors"]:
        if entry["sha256"] is None:
            report.skipped.append(f"{entry['model']}/{entry['name']}")
            continue
        entry["file"] = tensor_file(entry["model"], entry["name"])
        report.tensors += 1
        have = target.fetched.get(entry["sha256"]) or known.get(entry["sha256"])
        if have and have not in checked:
            checked[have] = mirror.verified(have, entry["sha256"], entry["nbytes"])
        if have and checked[have]:
            sources[entry["file"]] = have
            if entry["sha256"] in target.fetched:
                report.fetched += 1
            else:
                report.reused += 1
                report.bytes_reused += entry["nbytes"]
        else:
            missing.setdefault(entry["sha256"], []).append(entry)
    total = sum(entries[0]["nbytes"] for entries in missing.values())
    with (progress or _no_progress)(total) as advance:
        limit = asyncio.Semaphore(FETCH_CONCURRENCY)

        async def fetch(entries: list[dict[str, Any]]) -> None:
            async with limit:
                path = await target.fetch(mirror, entries[0], advance)
            for entry in entries:
                sources[entry["file"]] = path

        try:
            async with asyncio.TaskGroup() as group:  # one failure stops the others
                for entries in missing.values():
                    group.create_task(fetch(entries))
        except ExceptionGroup as failed:
            raise failed.exceptions[0] from None  # the first failure, as callers expect it
    report.fetched += sum(map(len, missing.values()))
    report.bytes_fetched = target.bytes_received
    unchanged = (
        current is not None
        and current_dir is not None
        and current.get("version") == manifest["version"]
        and [(e.get("file"), e.get("sha256")) for e in current.get("tensors", [])]
        == [(e.get("file"), e.get("sha256")) for e in manifest["tensors"]]
        and all(path == os.path.join(current_dir, rel) for rel, path in sources.items())
    )
    if not unchanged:
        report.directory = mirror.commit(manifest, sources)
        report.switched = True
    return report


class _Served:
    """A pt2serve server: manifest and versioned data URLs over HTTP."""

    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client = client
        self.url = url
        self.fetched: dict[str, str] = {}  # nothing is fetched while reading the manifest
        self.bytes_received = 0

    async def manifest(self, model: str | None, prefix: str | None, names: Sequence[str] | None) -> dict:
        url = manifest_url(self.url, model, prefix, names)
        response = await self._send("GET", url)
        if response.status_code != 200:
            raise reader.SourceError(f"{url}: {_describe(response)}")
        manifest = response.json()
        for entry in manifest["tensors"]:
            if entry.get("url"):
                entry["url"] = urllib.parse.urljoin(url, entry["url"])
        return manifest

    async def fetch(self, mirror: Mirror, entry: dict[str, Any], advance: Advance) -> str:
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

    async def _download(self, entry: dict[str, Any], partial: str, advance: Advance) -> None:
        have = os.path.getsize(partial) if os.path.exists(partial) else 0
        if have == entry["nbytes"] and os.path.exists(partial):
            return  # complete already (an earlier run stopped before moving it): verified next
        if have > entry["nbytes"]:
            have = 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        async with self.client.stream("GET", entry["url"], headers=headers) as response:
            if response.status_code == 206 and response.headers.get("content-range", "").startswith(
                f"bytes {have}-"
            ):
                mode = "ab"
            elif response.status_code == 200:
                mode, have = "wb", 0
            else:
                await response.aread()
                raise reader.SourceError(f"{entry['url']}: {_describe(response)}")
            _check_repr_digest(response, entry)
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


class _Direct:
    """An archive read straight from its location; digests are computed as the bytes stream by."""

    def __init__(self, archive: reader.Archive, mirror: Mirror) -> None:
        self.archive = archive
        self.mirror = mirror
        self.digests = Digests(archive)
        self.fetched: dict[str, str] = {}  # sha256 → blob streamed while computing the manifest
        self.bytes_received = 0

    async def manifest(self, model: str | None, prefix: str | None, names: Sequence[str] | None) -> dict:
        version = source_version(self.archive.source)
        tensors = select_tensors(self.archive.tensors(model), prefix=prefix, names=names)
        current = self.mirror.current_manifest()
        if current is not None and current.get("version") == version:
            # the same object (same ETag, or size and mtime): its digests are the ones we recorded
            recorded = {(e["model"], e["name"]): e["sha256"] for e in current.get("tensors", [])}
            if all((t.model, t.name) in recorded for t in tensors):
                for info in tensors:
                    if recorded[(info.model, info.name)] is not None:
                        self.digests.remember(
                            tensor_key(info), bytes.fromhex(recorded[(info.model, info.name)])
                        )
        for info in tensors:
            if info.readable and self.digests.cached(tensor_key(info)) is None:
                await self._stream_to_blob(info)
        return await build_manifest(self.digests, version, self.archive.models, tensors)

    async def _stream_to_blob(self, info: reader.TensorInfo) -> None:
        """Stream one tensor into a partial file (resuming one left by an earlier run of the
        same version), hashing as it goes; keep it as a blob unless the mirror has those bytes."""
        version = source_version(self.archive.source)
        key = hashlib.sha256(f"{version}\0{info.model}\0{info.name}".encode()).hexdigest()
        partial = self.mirror.partial_path(f"direct-{key}")
        have = os.path.getsize(partial) if os.path.exists(partial) else 0
        have = have if have <= (info.nbytes or 0) else 0

        async def chunks() -> AsyncIterator[bytes | memoryview]:
            with open(partial, "rb") as old:
                while block := old.read(4 << 20):
                    yield block
            with open(partial, "ab") as out:
                stream = self.archive.stream(info.name, model=info.model, start=have)
                async with aclosing(stream) as body:
                    async for chunk in body:
                        out.write(chunk)
                        self.bytes_received += len(chunk)
                        yield chunk

        with open(partial, "ab") as out:
            out.truncate(have)
        digest = (await self.digests.of(tensor_key(info), chunks)).hex()
        known = self.mirror.known_files().get(digest)
        if known and self.mirror.verified(known, digest, info.nbytes or 0):
            os.unlink(partial)
        else:
            self.fetched[digest] = self.mirror.finish_download(partial, digest)

    async def fetch(self, mirror: Mirror, entry: dict[str, Any], advance: Advance) -> str:
        """A tensor the manifest (recorded earlier) names but the mirror lost: stream it again."""
        info = self.archive.layout(entry["name"], entry["model"])
        await self._stream_to_blob(info)
        path = self.fetched.get(entry["sha256"])
        if path is None or not mirror.verified(path, entry["sha256"], entry["nbytes"]):
            raise reader.IntegrityError(
                f"{entry['model']}/{entry['name']}: bytes differ from the recorded digest"
            )
        advance(entry["nbytes"])
        return path


def _check_repr_digest(response: httpx.Response, entry: dict[str, Any]) -> None:
    """A server that states another digest than its manifest is serving other bytes: stop early."""
    field_value = response.headers.get("repr-digest")
    if field_value and field_value.startswith("sha-256=:"):
        stated = base64.b64decode(field_value[len("sha-256=:") :].rstrip(":")).hex()
        if stated != entry["sha256"]:
            raise reader.IntegrityError(
                f"{entry['url']}: Repr-Digest {stated} is not the manifest's {entry['sha256']}"
            )


def _describe(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return f"HTTP {response.status_code} {error['code']}: {error['message']}"
    except Exception:
        return f"HTTP {response.status_code}"


@contextlib.contextmanager
def _no_progress(total: int) -> Iterator[Advance]:
    yield lambda n: None


@contextlib.contextmanager
def _locked(mirror: Mirror) -> Iterator[None]:
    """One pull per directory at a time."""
    with open(os.path.join(mirror.work, "lock"), "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise reader.SourceError(f"{mirror.root}: another pull is updating this directory") from None
        yield
