"""Resource bounds for fuzzing: an address-space cap so sizes claimed by hostile fields fail fast."""

from __future__ import annotations

import contextlib
import pathlib
import resource
from collections.abc import Iterator


@contextlib.contextmanager
def memory_cap(extra: int = 2 << 30) -> Iterator[None]:
    """Cap the address space at what is in use now plus `extra`, so an allocation sized by a
    claimed field fails with MemoryError instead of succeeding lazily (Linux only)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        in_use = _vm_size()
    except (OSError, ValueError, AttributeError):
        yield
        return
    limit = in_use + extra
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _vm_size() -> int:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise OSError("no VmSize")
