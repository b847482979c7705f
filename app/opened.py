"""Archives a client opens by location (POST /archives/open, the viewer's Open box), with --allow-open.

The location passes the patterns (app/open_policy.py), the client's rate and the bound on opens in
progress (app/open_limits.py); then it becomes an archive of the registry like a configured one
(same routes, ETags, versioned URLs), under an id made from its location, so opening it again
finds the same archive. An http(s) location is read with the address rule as its resolver
(app/addresses.py): its host and every redirect's are checked at connect time; and the URL of each
request it makes, redirect hops included, is checked against the patterns again before it is sent.
A failed open answers the rule that refused it, never upstream statuses, hosts or addresses
(app/open_failures.py); the details go to the log. Past `open_max` opened archives the least
recently used open one is closed: one still opening, or not yet handed to the request that opened
it, counts toward the limit but is not evicted (each open evicts again as it finishes), so a
request always gets the archive it opened, and nothing it opened is left open without a slot.
Opened archives live in the process that opened them (one worker, or sticky sessions, when several
serve).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections import Counter

from reader.sources import redact_location

from .addresses import AddressGuard, Resolve, system_resolve
from .errors import ApiError, opened_failure
from .open_limits import OpenLimits
from .open_policy import OpenPolicy, refused
from .registry import Registry, Slot
from .settings import ArchiveSpec, Settings, stem_of


def opened_id(location: str) -> str:
    """`gpt2-3f2a1c9d0b4e5f6a7b8c`: the file stem (URL-safe characters only) and 80 bits of a digest of
    the location (too many to find another location with the same id: it would take the id first)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", stem_of(location)).strip("-.")[:40] or "archive"
    return f"{stem}-{hashlib.sha256(location.encode()).hexdigest()[:20]}"


class OpenedArchives:
    def __init__(self, registry: Registry, settings: Settings, resolve: Resolve = system_resolve) -> None:
        self.registry = registry
        self.policy = OpenPolicy(settings.allow_open)
        self.guard = AddressGuard(self.policy.named, resolve)  # tests give it a resolver of theirs
        self.limits = OpenLimits(settings.open_rate, settings.open_burst, settings.open_concurrency)
        self.max = max(1, settings.open_max)
        self._handing: Counter[str] = Counter()  # ids whose open() has not returned yet
        # every connection's host through the address rule, every request's URL through the patterns
        self._guarded = dataclasses.replace(
            registry.http_options, resolve_host=self.guard, check_url=self.policy.check_url
        )
        if self.policy.remote:  # the HTTP stack's import (~1 s) at start, not in the first open
            from reader.sources import HttpSource  # noqa: F401

    async def open(self, location: str, client: str) -> Slot:
        """The open archive at `location`, or the ApiError / ReaderError saying why not."""
        if self.policy.enabled:
            self.limits.admit(client)
        target = self.policy.check(location)
        archive_id = opened_id(target.location)
        slot = self.registry.slots.get(archive_id)
        if slot is not None and slot.spec.location != target.location:  # a configured archive's id
            raise refused(f"the id {archive_id!r} is taken by another archive")
        self._handing[archive_id] += 1
        try:
            if slot is None:
                with self.limits.opening():
                    slot = Slot(ArchiveSpec(archive_id, target.location), opened=True,
                                http_options=self._guarded if target.http else None)  # fmt: skip
                    self.registry.add_opened(slot)
                    await self._open(slot)
            elif slot.archive is None:
                await self._open(slot)
            if self.registry.serves(slot):
                self.registry.slot(archive_id)  # most recently used
        finally:
            self._handing -= Counter({archive_id: 1})
            await self._evict(keep=archive_id)
        if not self.registry.serves(slot) or slot.archive is None:  # others' opens closed it meanwhile
            message = (
                f"{archive_id} was closed as it opened (more opened at once than are kept); open it again"
            )
            raise ApiError(503, "opens_busy", message, {"retry-after": "2"})
        return slot

    async def _open(self, slot: Slot) -> None:
        await self.registry.open_now(slot)
        failure = slot.failure
        if slot.archive is not None or failure is None:
            return
        await self.registry.remove(slot.spec.id)  # a failed open leaves nothing behind
        raise opened_failure(failure, redact_location(slot.spec.location)) from None

    async def _evict(self, keep: str) -> None:
        """Past `max` opened archives, close the least recently used open ones; never `keep`, one
        still opening, nor one whose open() has not returned. They are chosen and detached at once
        (no await), then closed."""
        excess = len(self.registry.recent) - self.max
        victims = []
        for archive_id in list(self.registry.recent):
            if excess <= 0:
                break
            slot = self.registry.slots[archive_id]
            if archive_id == keep or archive_id in self._handing or slot.status == "opening":
                continue
            victims.append(self.registry.detach(archive_id))
            excess -= 1
        for victim in victims:
            if victim is not None:
                await self.registry.close_slot(victim)
