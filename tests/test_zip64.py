"""ZIP64: entries beyond 4 GiB, built as a sparse file rather than by writing 4 GiB."""

from __future__ import annotations

import os

import pytest

import reader
from testing.fixtures.zip64 import make_zip64_archive
from testing.paths import ARCHIVES

pytestmark = pytest.mark.unit


async def test_offsets_beyond_4gib(tmp_path) -> None:
    source = ARCHIVES / "layouts.pt2"
    target = tmp_path / "far.pt2"
    make_zip64_archive(source, target, gap=4_400_000_000)
    assert target.stat().st_size > 1 << 32
    assert target.stat().st_blocks * 512 < 64 << 20  # sparse: nothing like 4 GiB on disk
    async with reader.open_archive(source) as near, reader.open_archive(target) as far:
        assert far.stats["open"]["bytes"] < 1 << 20  # never reads the hole
        for info in near.tensors():
            moved = far.layout(info.name)
            assert (moved.sizes, moved.strides, moved.dtype) == (info.sizes, info.strides, info.dtype)
            if info.readable:
                for order in ("default", "contiguous"):
                    assert await far.read(info.name, order=order) == await near.read(info.name, order=order)
    os.unlink(target)
