"""The check that `read_into` agrees with `read`, shared by the local and the remote read_into tests."""

from __future__ import annotations

import numpy as np

import reader


async def agrees_with_read(ar: reader.Archive) -> int:
    """Every readable tensor in both orders, whole and in a middle range; how many were checked."""
    checked = 0
    for info in ar.tensors():
        if not info.readable:
            continue
        for order in ("default", "contiguous"):
            want = await ar.read(info.name, model=info.model, order=order)
            whole = np.empty(len(want), dtype=np.uint8)  # uninitialised: every byte must be written
            await ar.tensor(info.name, model=info.model, order=order).read_into(whole)
            assert whole.tobytes() == want, (info.name, order)
            tensor = ar.tensor(info.name, model=info.model, order=order)
            start, end = len(want) // 3, len(want) - len(want) // 4
            part = bytearray(b"\xa5" * (end - start))
            await tensor.read_into(part, start)
            assert bytes(part) == await tensor.read_range(start, end) == want[start:end]
            checked += 1
    return checked
