"""Task groups whose first failure reaches the caller as itself.

asyncio.TaskGroup cancels the other tasks at the first failure (what a read in parts wants: no part
outlives a failed read) but raises an ExceptionGroup; callers of the reader expect its typed errors
(SourceChanged, IntegrityError, ...), so the group's first failure is raised instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


@asynccontextmanager
async def task_group() -> AsyncIterator[asyncio.TaskGroup]:
    try:
        async with asyncio.TaskGroup() as group:
            yield group
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
