"""The archives this service serves, by id: opened at start-up (or lazily), each with a status.

Clients name archives only by id; locations come from the operator, so a client
can never make the service fetch a URL of its choosing. A remote archive that
changes (SourceChanged on a read, or a failed periodic revalidation) is reopened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

import reader
from reader.sources import HttpOptions, redact_location

from .settings import ArchiveSpec, Settings

log = logging.getLogger("pt2serve")


class ArchiveNotFound(LookupError):
    """No archive is configured under that id."""


class ArchiveUnavailable(Exception):
    """The archive is configured but not open (still opening, or it failed)."""


@dataclass(frozen=True)
class Served:
    """The archive a request is served from: its id and the open archive object."""

    id: str
    archive: reader.Archive


@dataclass
class Slot:
    spec: ArchiveSpec
    archive: reader.Archive | None = None
    status: str = "pending"  # pending | opening | open | error
    error: str | None = None
    failed_at: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def describe(self) -> dict[str, object]:
        """What /archives shows: never the location of a remote archive's credentials or query."""
        info: dict[str, object] = {
            "id": self.spec.id,
            "status": self.status,
            "location": redact_location(self.spec.location),
        }
        if self.error:
            info["error"] = self.error
        if self.archive is not None:
            info.update(
                models=self.archive.models,
                tensors=len(self.archive.tensors()),
                root=self.archive.root,
                executorch=[file.name for file in self.archive.executorch_files],
                container=self.archive.container,
                unreadable=self.archive.unreadable,
            )
        return info


class Registry:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.slots = {spec.id: Slot(spec) for spec in settings.archives}
        self.default_id = settings.archives[0].id if settings.archives else None
        self._revalidator: asyncio.Task[None] | None = None
        self._http_options = HttpOptions(
            connect_timeout=min(10.0, settings.upstream_timeout),
            read_timeout=settings.upstream_timeout,
            max_attempts=settings.upstream_attempts,
            time_budget=settings.upstream_budget,
            parallel_parts=settings.parallel_parts,
            part_size=settings.part_size,
            parallel_above=settings.parallel_above,
        )

    async def start(self) -> None:
        if not self.settings.lazy:
            await asyncio.gather(*(self._open(slot) for slot in self.slots.values()))
        if self.settings.revalidate_seconds > 0:
            self._revalidator = asyncio.create_task(self._revalidate_forever())

    async def close(self) -> None:
        if self._revalidator:
            self._revalidator.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._revalidator
        for slot in self.slots.values():
            if slot.archive is not None:
                await slot.archive.close()
                slot.archive = None

    def slot(self, archive_id: str | None) -> Slot:
        archive_id = archive_id or self.default_id
        if archive_id not in self.slots:
            raise ArchiveNotFound(f"no archive {archive_id!r} (archives: {', '.join(self.slots) or 'none'})")
        return self.slots[archive_id]

    async def get(self, archive_id: str | None) -> reader.Archive:
        slot = self.slot(archive_id)
        recently_failed = time.monotonic() - slot.failed_at < self.settings.retry_failed_after
        if slot.archive is None and not (slot.status == "error" and recently_failed):
            await self._open(slot)
        if slot.archive is None:
            raise ArchiveUnavailable(f"archive {slot.spec.id!r} is unavailable: {slot.error or slot.status}")
        return slot.archive

    async def serve(self, archive_id: str | None) -> Served:
        archive = await self.get(archive_id)
        return Served(self.slot(archive_id).spec.id, archive)

    async def reopen(self, archive_id: str, stale: reader.Archive) -> None:
        """Index the new version of an archive whose `stale` object saw it change; only if that
        object is still the current one: a late failure from a request that was reading an older
        version must not close the archive that replaced it while others stream from it."""
        slot = self.slots[archive_id]
        old = slot.archive
        if old is not stale:
            return
        slot.archive = None
        await self._open(slot)
        if old is not None:
            await old.close()

    async def _open(self, slot: Slot) -> None:
        async with slot.lock:
            if slot.archive is not None:
                return
            slot.status = "opening"
            try:
                slot.archive = await reader.open_archive(
                    slot.spec.location, chunk_size=self.settings.chunk_size, http_options=self._http_options
                )
            except reader.ReaderError as exc:
                slot.status, slot.error = "error", f"{type(exc).__name__}: {exc}"
                slot.failed_at = time.monotonic()
                log.warning("archive %s failed to open: %s", slot.spec.id, slot.error)
            else:
                slot.status, slot.error = "open", None

    async def _revalidate_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.revalidate_seconds)
            for archive_id, slot in list(self.slots.items()):
                try:
                    if slot.archive is None and slot.status == "error":
                        await self._open(slot)
                    elif slot.archive is not None and not await slot.archive.revalidate():
                        log.info("archive %s changed; reopening", archive_id)
                        await self.reopen(archive_id, stale=slot.archive)
                except reader.ReaderError as exc:
                    log.warning("revalidating %s failed: %s", archive_id, exc)
