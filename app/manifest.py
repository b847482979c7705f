"""Manifests: what an archive version holds, tensor by tensor, with each tensor's digest.

The manifest is what `pull` compares against the copy it has: same digest, same
bytes, nothing to fetch. Its order is stable (model, then name), so two builds of
one version are byte-identical and two versions diff line by line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from reader import ArchiveLike, TensorInfo
from reader.digests import Digests
from reader.formats.selection import select_tensors

MANIFEST_FORMAT = "pt2serve-manifest/1"
DIGEST_CONCURRENCY = 4  # tensors hashed at once while building (parallel range requests remotely)


def manifest_tensors(
    archive: ArchiveLike,
    model: str | None = None,
    prefix: str | None = None,
    names: Sequence[str] | None = None,
) -> list[TensorInfo]:
    """The tensors a selection means (reader's one rule: every model when none is named, an
    unknown name is `TensorNotFound`), in manifest order."""
    chosen = select_tensors(archive, model, prefix, names or None, every_model=True)
    return sorted(chosen, key=lambda info: (info.model, info.name))


async def build_manifest(
    digests: Digests, version: str, models: list[str], tensors: Sequence[TensorInfo]
) -> dict[str, Any]:
    """The manifest of `tensors` (already selected and ordered), every digest computed.

    Tensors that cannot be read (pickled, custom objects, symbolic sizes) are listed
    with `sha256: null`, so a client sees what it is not getting and why.
    """
    limit = asyncio.Semaphore(DIGEST_CONCURRENCY)

    async def entry(info: TensorInfo) -> dict[str, Any]:
        digest = None
        if info.readable:
            async with limit:
                digest = (await digests.tensor(info)).hex()
        return {
            "model": info.model,
            "name": info.name,
            "nbytes": info.nbytes if info.readable else None,
            "sha256": digest,
            "layout": info.to_dict(),
        }

    entries = await asyncio.gather(*(entry(info) for info in tensors))
    return {"format": MANIFEST_FORMAT, "version": version, "models": models, "tensors": entries}


__all__ = [
    "build_manifest",
    "manifest_tensors",
]
