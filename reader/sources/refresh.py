"""A credential refreshed when it is due, one refresh at a time (the one copy of that rule for
S3's, Cloud Storage's and Azure's credentials).

Reads run concurrently (parallel parts, several tensors), and each asks its credential before it
is signed: without a lock each would refresh at once. The first refreshes; the others wait, then
find it fresh (the check is made again under the lock) and take what it refreshed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class Refreshing:
    """Runs `refresh` when `due()`, at most one at a time."""

    def __init__(self) -> None:
        self._lock: asyncio.Lock | None = None  # made on first use, on the loop that uses it

    async def refresh_if_due(self, due: Callable[[], bool], refresh: Callable[[], Awaitable[None]]) -> bool:
        """Refresh if `due()` (asked again once the lock is held); True: this call refreshed."""
        if not due():
            return False
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if not due():  # another caller refreshed while this one waited
                return False
            await refresh()
            return True
