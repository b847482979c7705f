"""`reader.load` and every other one-call form (`reader.torch.load`, `reader.torch.read`): open,
run one coroutine, close, from synchronous code; `OpenOptions`, the keywords each hands
`open_archive`."""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..bodies.tensor import Order
from ..loading.selection import Selection
from ..loading.shards import Shard
from ..sources import DEFAULT_CHUNK_SIZE, ByteSource, HttpOptions, S3Settings

if TYPE_CHECKING:
    from ..archives.archive_like import ArchiveLike
    from ..archives.opener import open_archive
    from ..cache import CacheStore

T = TypeVar("T")


class _MainLoop:
    """The main thread's event loop, kept from one synchronous call to the next: a fresh loop per
    call (asyncio.run) costs a noticeable part of loading a small model from a local file with cold
    caches (bench/README.md, `load_model.py`).

    An asyncio.Runner, so Ctrl-C cancels the call as under asyncio.run; made by a loop factory, so
    it is never the thread's current event loop for other code; each call runs in a copy of the
    caller's context, as under asyncio.run (the runner's own would be the first caller's). A forked
    child leaves the parent's loop alone, unclosed (closing it would unregister the parent's
    descriptors from the epoll instance they share), and makes its own."""

    def __init__(self) -> None:
        self._runner: asyncio.Runner | None = None
        self._abandoned: list[asyncio.Runner] = []  # inherited through fork: kept, never closed
        os.register_at_fork(after_in_child=self._forked)
        atexit.register(self.close)

    def run(self, coroutine: Coroutine[Any, Any, None]) -> None:
        if self._runner is None:
            self._runner = asyncio.Runner(loop_factory=asyncio.new_event_loop)
        runner = self._runner
        try:
            runner.run(coroutine, context=contextvars.copy_context())
        finally:
            if asyncio.all_tasks(runner.get_loop()):  # what asyncio.run cancels before it returns
                runner.run(_cancel_leftovers())

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def _forked(self) -> None:
        if self._runner is not None:
            self._abandoned.append(self._runner)
            self._runner = None


_main_loop = _MainLoop()


async def _cancel_leftovers() -> None:
    """Cancel the tasks a call left running and wait for them: nothing of one call runs on into
    the next."""
    current = asyncio.current_task()
    leftovers = [task for task in asyncio.all_tasks() if task is not current]
    for task in leftovers:
        task.cancel()
    await asyncio.gather(*leftovers, return_exceptions=True)


def run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to its end from synchronous code: on the main thread's kept loop, on a
    loop of its own in any other thread, and from inside a running event loop (a notebook) on a
    loop of its own in another thread.

    The result is handed back outside the main task: on its way out, Python 3.11's asyncio.run
    formats a repr of that task (restoring the SIGINT handler), and formatting a task that holds a
    model's tensors as its result is slow."""
    found: list[T] = []

    async def main() -> None:
        found.append(await make())

    if _loop_running():
        with ThreadPoolExecutor(1) as pool:
            pool.submit(lambda: asyncio.run(main())).result()
    elif threading.current_thread() is threading.main_thread():
        _main_loop.run(main())
    else:
        asyncio.run(main())
    return found[0]


def _loop_running() -> bool:
    """Whether this thread runs an event loop. (Asked apart from the load: an exception handled
    while the load runs would become the context of every exception the load raises and keeps,
    and its traceback would keep `run_sync`'s frame and the model it returns alive.)"""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class OpenOptions:
    """The keywords of `open_archive` a one-call form or a synchronous handle takes and hands on."""

    tail_size: int | None = None
    chunk_size: int = DEFAULT_CHUNK_SIZE
    http_options: HttpOptions | None = None
    s3_settings: S3Settings | None = None
    cache_dir: str | os.PathLike[str] | CacheStore | None = None
    offline: bool | None = None
    stale_if_error: bool | None = None

    def open(self, location: str | os.PathLike[str] | ByteSource) -> open_archive:
        """`open_archive(location)` with these keywords: await it, or `async with` it."""
        from ..archives.opener import open_archive

        return open_archive(
            location,
            tail_size=self.tail_size,
            chunk_size=self.chunk_size,
            http_options=self.http_options,
            s3_settings=self.s3_settings,
            cache_dir=self.cache_dir,
            offline=self.offline,
            stale_if_error=self.stale_if_error,
        )


def with_archive(
    location: str | os.PathLike[str] | ByteSource,
    options: OpenOptions,
    use: Callable[[ArchiveLike], Awaitable[T]],
) -> T:
    """Open `location` with `options`, run `use` on it, close it: synchronously."""

    async def run() -> T:
        async with options.open(location) as archive:
            return await use(archive)

    return run_sync(run)


def load(
    location: str | os.PathLike[str] | ByteSource,
    *,
    model: str | None = None,
    prefix: str | None = None,
    names: Sequence[str] | None = None,
    order: Order = "default",
    copy: bool = False,
    verify: bool | None = None,
    shard: Shard | None = None,
    tail_size: int | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    http_options: HttpOptions | None = None,
    s3_settings: S3Settings | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    stale_if_error: bool | None = None,
) -> dict[str, np.ndarray]:
    """Open `location`, load the selection as `Archive.load` does, close. The selection's keywords
    are `Archive.load`'s; the others `open_archive`'s."""
    selection = Selection(model, prefix, names, order, copy, verify, shard)
    options = OpenOptions(
        tail_size, chunk_size, http_options, s3_settings, cache_dir, offline, stale_if_error
    )
    return with_archive(location, options, lambda archive: _arrays(archive, selection))


def _arrays(archive: Any, selection: Selection) -> Awaitable[dict[str, np.ndarray]]:
    """The archive's own load (an Archive's, or a sharded checkpoint's split by shard)."""
    return archive.load(**selection.keywords())
