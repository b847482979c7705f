"""One check every remote source's tests share: an archive read remotely equals the same file read locally."""

from __future__ import annotations

import pathlib

import reader
from testing.paths import ARCHIVES


async def assert_same_as_local(
    remote: reader.Archive, local_path: pathlib.Path, *, most: int | None = None
) -> None:
    """Layouts equal; sampled tensors' bytes equal in both orders, by read and by stream (every fifth
    tensor, or about `most` of them where each read costs a request worth saving)."""
    async with reader.open_archive(local_path) as local:
        assert [t.to_dict() for t in remote.tensors()] == [t.to_dict() for t in local.tensors()]
        tensors = local.tensors()
        step = 5 if most is None else max(5, len(tensors) // most)
        for info in tensors[::step]:
            if not info.readable:
                continue
            for order in ("default", "contiguous"):
                want = await local.read(info.name, model=info.model, order=order)
                assert await remote.read(info.name, model=info.model, order=order) == want
                streamed = [
                    bytes(c) async for c in remote.tensor(info.name, model=info.model, order=order).chunks()
                ]
                assert b"".join(streamed) == want


async def same_as_fixture(remote: reader.Archive, name: str) -> None:
    """`assert_same_as_local` against the committed fixture archive `name`."""
    await assert_same_as_local(remote, ARCHIVES / name)
