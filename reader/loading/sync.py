"""`reader.load`: the synchronous, one-call form, for scripts and servers at start-up."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from ..sources import ByteSource

T = TypeVar("T")


def run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to its end from synchronous code; from inside a running event loop (a
    notebook) it runs on a loop of its own in another thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())  # type: ignore[arg-type]
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()  # type: ignore[arg-type]


def load(
    location: str | os.PathLike[str] | ByteSource,
    *,
    model: str | None = None,
    prefix: str | None = None,
    names: Sequence[str] | None = None,
    order: str = "default",
    copy: bool = False,
    verify: bool | None = None,
    **options: Any,
) -> dict[str, np.ndarray]:
    """Open `location`, load the selection as `Archive.load` does, close. `options` go to
    `open_archive` (http_options, s3_settings, tail_size, chunk_size)."""
    from ..archive import open_archive

    async def loaded() -> dict[str, np.ndarray]:
        async with open_archive(location, **options) as archive:
            return await archive.load(model, prefix, names, order, copy=copy, verify=verify)

    return run_sync(loaded)
