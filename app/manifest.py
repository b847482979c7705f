"""Manifests: what an archive version holds, tensor by tensor, with each tensor's digest.

The manifest is what `pull` compares against the copy it has: same digest, same
bytes, nothing to fetch. Its order is stable (model, then name), so two builds of
one version are byte-identical and two versions diff line by line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from reader import TensorInfo
from reader.digests import Digests

MANIFEST_FORMAT = "pt2serve-manifest/1"
DIGEST_CONCURRENCY = 4  # tensors hashed at once while building (parallel range requests remotely)


def select_tensors(
    tensors: Iterable[TensorInfo],
    *,
    prefix: str | None = None,
    names: Sequence[str] | None = None,
) -> list[TensorInfo]:
    """The tensors a selection means, in manifest order: names starting with `prefix`,
    and only the given `names` when there are any."""
    wanted = set(names) if names else None
    chosen = [
        info
        for info in tensors
        if (not prefix or info.name.startswith(prefix)) and (wanted is None or info.name in wanted)
    ]
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
    "select_tensors",
]
