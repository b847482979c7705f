"""Fault a fresh buffer's pages in on another thread while a receive fills it.

A load receives a model into fresh memory, and the kernel backs each page when it is first written:
on the event loop's thread, inside the socket reads. Usually that is cheap (NumPy asks for huge pages
for big buffers), but memory another process just freed can cost the VM far more to back again:
some rounds of `reader.load` from loopback S3 spent far more system time than others. Faulting the
buffer in from its end backwards on a thread (`MADV_POPULATE_WRITE`: pages backed, contents
untouched, so it is safe beside the receive writing from the start) keeps the rounds close together
(bench/README.md, `load_model.py`).
Linux 5.14 and later; elsewhere (or refused) it does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import mmap
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import numpy as np

MADV_POPULATE_WRITE = 23  # linux/mman.h (Python's mmap module names it from 3.13 on)
STEP = 16 << 20  # faulted in per call, so a finished receive stops it soon
MIN_SIZE = 64 << 20  # smaller buffers are not worth a thread


@functools.cache
def _madvise() -> ctypes._CFuncPtr | None:
    if sys.platform != "linux":
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


def populate(buffer: np.ndarray, stop: threading.Event) -> None:
    """Back `buffer`'s whole pages, from its end towards its start, until done or `stop` is set."""
    madvise = _madvise()
    if madvise is None:
        return
    page = mmap.PAGESIZE
    low = -(-buffer.ctypes.data // page) * page
    end = (buffer.ctypes.data + buffer.nbytes) // page * page
    while end > low and not stop.is_set():
        start = max(low, end - STEP)
        if madvise(start, end - start, MADV_POPULATE_WRITE):  # refused (an older kernel): leave it
            return
        end = start


@asynccontextmanager
async def prefaulting(buffer: np.ndarray) -> AsyncIterator[None]:
    """While the body runs, `buffer`'s pages are faulted in on a thread (big buffers only); on the
    way out the thread is stopped and waited for."""
    if buffer.nbytes < MIN_SIZE or _madvise() is None:
        yield
        return
    stop = threading.Event()
    faulting = asyncio.get_running_loop().run_in_executor(None, populate, buffer, stop)
    try:
        yield
    finally:
        stop.set()
        await asyncio.shield(faulting)
