"""Pulling straight from an archive (a path, `s3://`, `https://…/x.pt2`) with the same reader.

Without a server there is no manifest to compare with: every tensor is streamed into a
partial file while its SHA-256 is computed (resuming a partial file an earlier run of the
same version left), unless the archive's version equals the mirror's, whose recorded
digests then hold (the version names the object's bytes: same ETag, or size and mtime).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing

import reader
from reader.digests import Digests, sha256_of, tensor_key
from reader.formats.planned import PlannedBody
from reader.versions import source_version

from ..manifest import build_manifest, manifest_tensors
from .mirror import Mirror
from .update import Advance, Entry, Manifest


class FromArchive:
    """An archive read straight from its location; digests are computed as the bytes stream by."""

    def __init__(self, archive: reader.Archive, mirror: Mirror) -> None:
        self.archive = archive
        self.mirror = mirror
        self.digests = Digests(archive)
        self.fetched: dict[str, str] = {}  # sha256 → blob streamed while computing the manifest
        self.bytes_received = 0

    async def manifest(self, model: str | None, prefix: str | None, names: Sequence[str] | None) -> Manifest:
        version = source_version(self.archive.source)
        tensors = manifest_tensors(self.archive, model, prefix, names)
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
        wanted = [t for t in tensors if t.readable and self.digests.cached(tensor_key(t)) is None]
        fresh = [t for t in wanted if not os.path.exists(self._partial(t))]
        await self._stream_fresh(fresh)
        for info in wanted:
            if info not in fresh:  # a partial file an earlier run left: resumed
                await self._stream_to_blob(info)
        return await build_manifest(self.digests, version, self.archive.models, tensors)

    def _partial(self, info: reader.TensorInfo) -> str:
        version = source_version(self.archive.source)
        key = hashlib.sha256(f"{version}\0{info.model}\0{info.name}".encode()).hexdigest()
        return self.mirror.partial_path(f"direct-{key}")

    async def _stream_fresh(self, infos: list[reader.TensorInfo]) -> None:
        """Tensors with nothing downloaded yet, read as one plan (runs of tensors lying in order in
        the archive come as one range, in parallel parts: a first pull runs at the wire's speed),
        each into its partial file while it is hashed."""
        tensors = [self.archive.tensor(info.name, model=info.model) for info in infos]
        body = PlannedBody(tensors)
        index, left, out, hasher = -1, 0, None, hashlib.sha256()

        def finish_done() -> None:
            nonlocal index, left, out, hasher
            while left == 0 and index + 1 <= len(infos):
                if out is not None:
                    out.close()
                    self._keep(infos[index], self._partial(infos[index]), hasher.digest())
                    out = None
                index += 1
                if index == len(infos):
                    return
                left, hasher = tensors[index].length, hashlib.sha256()
                out = open(self._partial(infos[index]), "wb")  # noqa: SIM115 - closed as the tensor ends

        try:
            finish_done()
            async with aclosing(body.chunks(0, body.length, 4 << 20)) as chunks:
                async for chunk in chunks:
                    view = memoryview(chunk)
                    while view:
                        piece, view = view[:left], view[left:]
                        assert out is not None
                        out.write(piece)
                        hasher.update(piece)
                        self.bytes_received += len(piece)
                        left -= len(piece)
                        finish_done()
        finally:
            if out is not None:
                out.close()

    async def _stream_to_blob(self, info: reader.TensorInfo) -> None:
        """Stream one tensor into a partial file (resuming one left by an earlier run of the
        same version), hashing as it goes; keep it as a blob unless the mirror has those bytes."""
        partial = self._partial(info)
        have = os.path.getsize(partial) if os.path.exists(partial) else 0
        have = have if have <= info.geometry.nbytes else 0

        async def chunks() -> AsyncIterator[bytes | memoryview]:
            with open(partial, "rb") as old:
                while block := old.read(4 << 20):
                    yield block
            with open(partial, "ab") as out:
                stream = self.archive.tensor(info.name, model=info.model).chunks(start=have)
                async with aclosing(stream) as body:
                    async for chunk in body:
                        out.write(chunk)
                        self.bytes_received += len(chunk)
                        yield chunk

        with open(partial, "ab") as out:
            out.truncate(have)
        raw = await sha256_of(chunks())  # not Digests.of: a lost file is streamed again
        self._keep(info, partial, raw)

    def _keep(self, info: reader.TensorInfo, partial: str, raw: bytes) -> None:
        """A tensor's partial file, complete and hashed: a blob, unless the mirror has those bytes."""
        self.digests.remember(tensor_key(info), raw)
        digest = raw.hex()
        known = self.mirror.known_files().get(digest)
        if known and self.mirror.verified(known, digest, info.geometry.nbytes):
            os.unlink(partial)
        else:
            self.fetched[digest] = self.mirror.finish_download(partial, digest)

    async def fetch(self, mirror: Mirror, entry: Entry, advance: Advance) -> str:
        """A tensor the manifest (recorded earlier) names but the mirror lost: stream it again."""
        info = self.archive.layout(entry["name"], model=entry["model"])
        await self._stream_to_blob(info)
        path = self.fetched.get(entry["sha256"])
        if path is None or not mirror.verified(path, entry["sha256"], entry["nbytes"]):
            raise reader.IntegrityError(
                f"{entry['model']}/{entry['name']}: bytes differ from the recorded digest"
            )
        advance(entry["nbytes"])
        return path
