"""Our .ptd of one model, built as the service and the CLI build it (with its plan, or with the tensors
left out), and an archive carrying ExecuTorch program files (the fixture carrying), for the tests that
read them back."""

from __future__ import annotations

import pathlib

import pytest

import reader
from reader.formats import ptd
from reader.formats.body import read_body
from reader.formats.ptd import DEFAULT_ALIGNMENT, plan_ptd, ptd_body, writable
from testing.paths import ARCHIVES


async def ptd_bytes(path: pathlib.Path, model: str, alignment: int = DEFAULT_ALIGNMENT) -> tuple[bytes, list]:
    """Our .ptd of one model as the service and the CLI build it; and the tensors left out."""
    async with reader.open_archive(path) as ar:
        tensors = ar.tensors(model=model)
        plan = plan_ptd([t for t in tensors if writable(t)], alignment)
        body = ptd_body(plan, lambda info, order: ar.tensor(info.name, model=info.model, order=order))
        assert body.length == plan.length
        return await read_body(body, 0, body.length, 1 << 16), [t for t in tensors if not writable(t)]


PROGRAM = bytes(range(256)) * 1200  # stands in for a .pte: the service serves it as stored


async def library_ptd(path: pathlib.Path, model: str | None = None, alignment: int = 128):
    async with reader.open_archive(path) as ar:
        plan = ptd.plan_ptd(
            [t for t in ar.tensors(model=ar.resolve_model(model)) if ptd.writable(t)], alignment
        )
        body = ptd.ptd_body(plan, lambda info, order: ar.tensor(info.name, model=info.model, order=order))
        return plan, await read_body(body, 0, body.length, 1 << 16)


@pytest.fixture(scope="module")
def carrying(tmp_path_factory) -> pathlib.Path:
    """layouts.pt2's program re-packaged by torch with two files under data/executorch/."""
    pytest.importorskip("torch", reason="torch builds the archive (pip install -e '.[test]')")
    import torch
    from torch.export.pt2_archive._package import package_pt2

    path = tmp_path_factory.mktemp("carrying") / "carrying.pt2"
    package_pt2(
        str(path),
        exported_programs={"model": torch.export.load(str(ARCHIVES / "layouts.pt2"))},
        executorch_files={"model.pte": PROGRAM, "extra/notes.bin": b"hello"},
    )
    return path
