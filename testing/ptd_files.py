"""Our .ptd of one model, built as the service and the CLI build it, for the tests that read it back."""

from __future__ import annotations

import pathlib

import reader
from reader.formats.body import read_body
from reader.formats.ptd import DEFAULT_ALIGNMENT, plan_ptd, ptd_body, writable


async def ptd_bytes(path: pathlib.Path, model: str, alignment: int = DEFAULT_ALIGNMENT) -> tuple[bytes, list]:
    """Our .ptd of one model as the service and the CLI build it; and the tensors left out."""
    async with reader.open_archive(path) as ar:
        tensors = ar.tensors(model=model)
        plan = plan_ptd([t for t in tensors if writable(t)], alignment)
        body = ptd_body(plan, lambda info, order: ar.tensor(info.name, model=info.model, order=order))
        assert body.length == plan.length
        return await read_body(body, 0, body.length, 1 << 16), [t for t in tensors if not writable(t)]
