"""The archives this service serves, by id: opened at start-up (or lazily), each with a status.

Clients name archives by id; locations come from the operator. The one exception is
opening (app/opened.py): only with --allow-open, only locations its patterns and the
address rule allow, kept as archives of their own (least recently used closed first). A remote archive that
changes (SourceChanged on a read, or a failed periodic revalidation) is reopened.

Each open archive is one version (reader.versions): the version it replaces is kept
open for a grace period (`version_grace_seconds`), so downloads pinned to it finish
on the bytes they started, then closed and remembered as gone (410, not 404).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import reader
from reader.bodies import verify_ahead
from reader.digests import Digests
from reader.sources import HttpOptions, redact_location
from reader.versions import source_version

from .open_failures import public_failure
from .settings import ArchiveSpec, Settings

log = logging.getLogger("pt2serve")
T = TypeVar("T")


class ArchiveNotFound(LookupError):
    """No archive is configured under that id."""


class ArchiveUnavailable(Exception):
    """The archive is configured but not open (still opening, or it failed)."""


class VersionNotServed(LookupError):
    """A URL names a version of an archive that is not served: `gone` if it was once."""

    def __init__(self, archive_id: str, version: str, current: str | None, gone: bool) -> None:
        state = "is no longer served" if gone else "is not a version of it"
        super().__init__(f"archive {archive_id!r}: version {version!r} {state}; the current is {current!r}")
        self.archive_id, self.version, self.current, self.gone = archive_id, version, current, gone


PREPARED_MAX = 8192  # answers kept per archive version (about 1 KiB each)


@dataclass
class Opened:
    """One version of an archive, open: the archive object, its version, its digests, and what
    the hot routes computed for it that no request can change (`prepared`)."""

    archive: reader.Archive
    version: str
    digests: Digests
    retire_at: float = float("inf")  # (monotonic) when a replaced version is closed
    ahead: asyncio.Task[None] | None = None  # digests computed in the background
    prepared: dict[Hashable, Any] = field(default_factory=dict)

    def remember(self, key: Hashable, value: T) -> T:
        """Keep `value` under `key` for the life of this version (the bytes it describes are fixed)."""
        if len(self.prepared) >= PREPARED_MAX:
            self.prepared.clear()
        self.prepared[key] = value
        return value

    async def close(self) -> None:
        if self.ahead is not None:
            self.ahead.cancel()
            with contextlib.suppress(asyncio.CancelledError, reader.ReaderError):
                await self.ahead
        await self.archive.close()


class Served(NamedTuple):
    """The archive version a request is served from. `pinned`: the URL named the version
    (so the answer may be cached for good). Made for every request: a named tuple."""

    id: str
    opened: Opened
    pinned: bool = False

    @property
    def archive(self) -> reader.Archive:
        return self.opened.archive

    @property
    def version(self) -> str:
        return self.opened.version

    @property
    def digests(self) -> Digests:
        return self.opened.digests

    @property
    def local(self) -> bool:
        """A local file: reading a tensor once more (for its digest) costs little."""
        return is_local(self.opened.archive)


def is_local(archive: reader.Archive | reader.ShardedArchive) -> bool:
    """Read from local files: a local archive, or a sharded checkpoint all of whose files are local."""
    return archive.source.local


GONE_REMEMBERED = 64  # retired versions per archive answered with 410 rather than 404
UNKNOWN_VERSION_RECHECK = 1.0  # seconds: an unknown version triggers a revalidation at most this often


@dataclass
class Slot:
    spec: ArchiveSpec
    current: Opened | None = None
    status: str = "pending"  # pending | opening | open | error | closed (an opened one, removed)
    error: str | None = None
    failed_at: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    retired: list[Opened] = field(default_factory=list)  # replaced versions still in their grace period
    gone: deque[str] = field(default_factory=lambda: deque(maxlen=GONE_REMEMBERED))
    rechecked_at: float = 0.0
    http_options: HttpOptions | None = None  # None: the registry's (opened http(s): with the address rule)
    opened: bool = False  # opened by a client's request (app/opened.py), not configured
    failure: reader.ReaderError | None = None  # why the last open failed

    @property
    def archive(self) -> reader.Archive | None:
        return None if self.current is None else self.current.archive

    @property
    def version(self) -> str | None:
        return None if self.current is None else self.current.version

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
                version=self.version,
                models=self.archive.models,
                tensors=len(self.archive.tensors()),
                root=self.archive.root,
                executorch=[file.name for file in self.archive.executorch_files],
                container=self.archive.container,
                unreadable=self.archive.unreadable,
            )
        if self.opened:
            info["opened"] = True
        if self.retired:
            info["retiring"] = [opened.version for opened in self.retired]
        info.update(self.staleness() or {})
        return info

    def staleness(self) -> dict[str, object] | None:
        """Set while the version served was opened from the cache because its origin could not be
        reached (stale-if-error): which version, how old (seconds since the origin last confirmed it)."""
        archive = self.archive
        stale = None if archive is None else archive.stale
        if stale is None:
            return None
        age = int(stale.age)
        return {"stale": True, "revalidated": archive.revalidated, "version": self.version, "age": age}


class Registry:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.slots = {spec.id: Slot(spec) for spec in settings.archives}
        self.default_id = settings.archives[0].id if settings.archives else None
        self._revalidator: asyncio.Task[None] | None = None
        self.recent: OrderedDict[str, None] = OrderedDict()  # opened archives, least recently used first
        transfer = {
            name: value
            for name in ("parallel_parts", "part_size", "parallel_above")
            if (value := getattr(settings, name)) is not None
        }
        self._http_options = HttpOptions(
            connect_timeout=min(10.0, settings.upstream_timeout),
            read_timeout=settings.upstream_timeout,
            max_attempts=settings.upstream_attempts,
            time_budget=settings.upstream_budget,
            ca_bundle=settings.ca_bundle,
            receive_thread=False,  # the service relays each chunk: faster received on the loop
            **transfer,
        )

    @property
    def http_options(self) -> HttpOptions:
        return self._http_options

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
            for opened in [*slot.retired, *([slot.current] if slot.current else [])]:
                await opened.close()
            slot.current, slot.retired = None, []

    def slot(self, archive_id: str | None) -> Slot:
        archive_id = archive_id or self.default_id
        if archive_id not in self.slots:
            raise ArchiveNotFound(f"no archive {archive_id!r} (archives: {', '.join(self.slots) or 'none'})")
        if archive_id in self.recent:
            self.recent.move_to_end(archive_id)
        return self.slots[archive_id]

    def add_opened(self, slot: Slot) -> None:
        self.slots[slot.spec.id] = slot
        self.recent[slot.spec.id] = None

    def detach(self, archive_id: str) -> Slot | None:
        """Forget an opened archive at once (no request finds it after this); `close_slot` closes it.
        An open of it still under way closes what it opens as soon as it has it (`_open`)."""
        slot = self.slots.pop(archive_id, None)
        self.recent.pop(archive_id, None)
        if slot is not None:
            slot.status = "closed"
        return slot

    @staticmethod
    async def close_slot(slot: Slot) -> None:
        """Close a detached slot's versions (requests reading them fail)."""
        versions = [*slot.retired, *([slot.current] if slot.current else [])]
        slot.current, slot.retired = None, []
        for opened in versions:
            await opened.close()

    async def remove(self, archive_id: str) -> None:
        """Forget an opened archive and close its versions (requests reading it fail)."""
        slot = self.detach(archive_id)
        if slot is not None:
            await self.close_slot(slot)

    def serves(self, slot: Slot) -> bool:
        """Whether `slot` is still this registry's (an opened one may have been removed meanwhile)."""
        return self.slots.get(slot.spec.id) is slot

    async def open_now(self, slot: Slot) -> None:
        """Open `slot` (if it is not); its failure is in slot.failure."""
        await self._open(slot)

    async def get(self, archive_id: str | None) -> reader.Archive:
        slot = self.slot(archive_id)
        recently_failed = time.monotonic() - slot.failed_at < self.settings.retry_failed_after
        if slot.archive is None and not (slot.status == "error" and recently_failed):
            await self._open(slot)
        if slot.archive is None:
            raise ArchiveUnavailable(f"archive {slot.spec.id!r} is unavailable: {slot.error or slot.status}")
        return slot.archive

    async def serve(self, archive_id: str | None, version: str | None = None) -> Served:
        """The archive version a URL names: the current one, or a replaced one in its grace period.

        A version nobody here knows may be one another replica already serves: the source
        is revalidated (at most once a second) before the answer is no."""
        slot = self.slot(archive_id)
        if slot.current is None:  # not open yet (or failed): open it, or say why not
            await self.get(archive_id)
        if slot.retired:
            await self._retire_expired(slot)
        found = self._find(slot, version)
        if found is None and version not in slot.gone:
            now = time.monotonic()
            if now - slot.rechecked_at >= UNKNOWN_VERSION_RECHECK and slot.current is not None:
                slot.rechecked_at = now
                current = slot.current.archive
                if not await current.revalidate():
                    await self.reopen(slot.spec.id, stale=current)
                found = self._find(slot, version)
        if found is None:
            raise VersionNotServed(slot.spec.id, str(version), slot.version, version in slot.gone)
        return Served(slot.spec.id, found, pinned=version is not None)

    @staticmethod
    def _find(slot: Slot, version: str | None) -> Opened | None:
        if slot.current is not None and version in (None, slot.current.version):
            return slot.current
        return next((opened for opened in slot.retired if opened.version == version), None)

    async def retire(self, archive_id: str, version: str) -> None:
        """A replaced version whose bytes are no longer readable (its object is gone): close it now."""
        slot = self.slots[archive_id]
        for opened in [opened for opened in slot.retired if opened.version == version]:
            opened.retire_at = 0.0
        await self._retire_expired(slot)

    async def reopen(self, archive_id: str, stale: reader.Archive) -> None:
        """Index the new version of an archive whose `stale` object saw it change; only if that
        object is still the current one: a late failure from a request that was reading an older
        version must not replace the archive that replaced it. The old version stays open for
        the grace period."""
        slot = self.slots[archive_id]
        old = slot.current
        if old is None or old.archive is not stale:
            return
        slot.current = None
        await self._open(slot)
        if not self.serves(slot):  # removed while it reopened: nothing would ever retire the old one
            await old.close()
            return
        old.retire_at = time.monotonic() + self.settings.version_grace_seconds
        slot.retired = [opened for opened in slot.retired if opened.version != old.version] + [old]
        await self._retire_expired(slot)

    async def _retire_expired(self, slot: Slot) -> None:
        now = time.monotonic()
        expired = [opened for opened in slot.retired if opened.retire_at <= now]
        if not expired:
            return
        slot.retired = [opened for opened in slot.retired if opened.retire_at > now]
        for opened in expired:
            if opened.version != slot.version:
                slot.gone.append(opened.version)
            await opened.close()

    async def _open(self, slot: Slot) -> None:
        """Open `slot`; it ends `open`, or `error` with the reason, never left `opening`."""
        async with slot.lock:
            if slot.current is not None or not self.serves(slot):  # open, or removed meanwhile
                return
            slot.status = "opening"
            try:
                archive = await reader.open_archive(
                    slot.spec.location,
                    chunk_size=self.settings.chunk_size,
                    http_options=slot.http_options or self._http_options,
                )
            except reader.ReaderError as exc:
                self._failed(slot, exc)
            except Exception as exc:  # a bug of ours: the slot still says so, and the log has it all
                log.exception("archive %s failed to open", slot.spec.id)
                self._failed(slot, reader.ReaderError(f"internal error while opening: {type(exc).__name__}"))
            except BaseException:  # cancelled (the request or the service went away): not opening any more
                slot.status = "pending" if self.serves(slot) else "closed"
                raise
            else:
                if not self.serves(slot):  # removed while it opened: nobody would ever close it
                    slot.status = "closed"
                    await archive.close()
                    return
                opened = Opened(archive, source_version(archive.source), Digests(archive))
                digests = self._digests_ahead(archive)
                # "off": nothing read in the background (an entry is verified by its first whole read)
                verify = (  # one local file (a sharded checkpoint's shards are not checked ahead)
                    self.settings.digests_ahead != "off"
                    and isinstance(archive, reader.Archive)
                    and archive.source.local
                )
                if digests or verify:
                    ahead = self._compute_ahead(slot.spec.id, opened, digests, verify)
                    opened.ahead = asyncio.create_task(ahead)
                slot.current, slot.status, slot.error, slot.failure = opened, "open", None, None
                if opened.version in slot.gone:
                    slot.gone.remove(opened.version)

    @staticmethod
    def _failed(slot: Slot, exc: reader.ReaderError) -> None:
        """The slot's failed state; an opened archive's error names the kind only (its details are
        for the log: an open must not be an oracle of upstream statuses and addresses)."""
        detail = f"{type(exc).__name__}: {exc}"
        slot.error = public_failure(exc)[1] if slot.opened else detail
        slot.status, slot.failure = "error", exc
        slot.failed_at = time.monotonic()
        log.warning("archive %s failed to open: %s", slot.spec.id, detail)

    def _digests_ahead(self, archive: reader.Archive) -> bool:
        mode = self.settings.digests_ahead
        return mode == "all" or (mode == "local" and is_local(archive))

    @staticmethod
    async def _compute_ahead(archive_id: str, opened: Opened, digests: bool, verify: bool) -> None:
        """The digests (if asked for), then the CRC-32 of each local payload the digests' reads did
        not cover (reader.bodies.verified: what may then be sent with sendfile)."""
        try:
            if digests:
                await opened.digests.compute_ahead(opened.archive.tensors())
            if verify:
                await verify_ahead(opened.archive)
        except reader.ReaderError as exc:  # requests compute what they need, and report errors
            log.warning("checking %s@%s ahead stopped: %s", archive_id, opened.version, exc)

    async def _revalidate_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.revalidate_seconds)
            for archive_id, slot in list(self.slots.items()):
                await self._retire_expired(slot)
                try:
                    if slot.archive is None and slot.status == "error":
                        await self._open(slot)
                    elif slot.archive is not None and not await slot.archive.revalidate():
                        log.info("archive %s changed; reopening", archive_id)
                        await self.reopen(archive_id, stale=slot.archive)
                except reader.ReaderError as exc:
                    log.warning("revalidating %s failed: %s", archive_id, exc)
