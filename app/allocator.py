"""glibc malloc settings for the service: freed buffers are reused rather than handed back.

The service relays remote tensors through a fresh 1 MiB buffer per socket read
(reader/sources/transport/http1/inbox.py) and reads local ones into fresh buffers (reader/sources/local.py).
With glibc's defaults the heap's top is trimmed and large blocks are mapped afresh, so new
buffers fault their pages in again: about 35,000 page faults per 512 MiB relayed, each page
zeroed by the kernel. These settings bring `bench/serve_remote.py`'s proxy row closer to nginx
`proxy_pass` (bench/README.md has the figures). Blocks under 4 MiB come from
the heap, and up to 64 MiB of free heap is kept for the next buffers. Other C libraries are
left alone.
"""

from __future__ import annotations

import ctypes
import platform

M_TRIM_THRESHOLD = -1  # glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 4 << 20
TRIM_THRESHOLD = 64 << 20


def keep_freed_buffers() -> bool:
    """Apply the settings to this process; True if glibc took them."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
