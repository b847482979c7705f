"""One pull's work once the target manifest is known: reuse what the mirror holds (verified),
fetch the rest (each digest once, a few at a time), and switch versions unless nothing changed."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from .mirror import Mirror, tensor_file

FETCH_CONCURRENCY = 4
Advance = Callable[[int], None]
ProgressFactory = Callable[[int], AbstractContextManager[Advance]]
Manifest = dict[str, Any]
Entry = dict[str, Any]


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


class Target(Protocol):
    """Where a pull gets bytes from: a pt2serve server or an archive read directly."""

    fetched: dict[str, str]  # sha256 → verified file obtained while building the manifest
    bytes_received: int

    async def fetch(self, mirror: Mirror, entry: Entry, advance: Advance) -> str:
        """Download one tensor, verify it against entry["sha256"], return the stored file."""
        ...


async def update(
    mirror: Mirror, manifest: Manifest, target: Target, progress: ProgressFactory | None
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


@contextlib.contextmanager
def _no_progress(total: int) -> Iterator[Advance]:
    yield lambda n: None
