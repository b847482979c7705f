"""`reader.load`: the synchronous, one-call form, for scripts and servers at start-up."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..sources import ByteSource

if TYPE_CHECKING:
    from ..archive import Archive

T = TypeVar("T")


def run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to its end from synchronous code; from inside a running event loop (a
    notebook) it runs on a loop of its own in another thread.

    The result is handed back outside the main task: on its way out, Python 3.11's asyncio.run
    formats a repr of that task (restoring the SIGINT handler), and a task holding a model's
    tensors as its result took 50-90 ms to format them."""
    found: list[T] = []

    async def main() -> None:
        found.append(await make())

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(main())
        return found[0]
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: asyncio.run(main())).result()
    return found[0]


def with_archive(
    location: str | os.PathLike[str] | ByteSource,
    options: dict[str, Any],
    use: Callable[[Archive], Awaitable[T]],
) -> T:
    """Open `location` (`options` go to `open_archive`), run `use` on it, close it: synchronously."""
    from ..archive import open_archive

    async def run() -> T:
        async with open_archive(location, **options) as archive:
            return await use(archive)

    return run_sync(run)


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
    return with_archive(
        location, options, lambda archive: archive.load(model, prefix, names, order, copy=copy, verify=verify)
    )
