"""The local-file source: exact reads, chunked streams, typed errors, few reads to open (a FIFO:
test_local_fifo.py)."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest

import reader
from reader.sources import BytesSource, LocalFileSource
from reader.sources.local import INLINE_READ_LIMIT
from testing.paths import ARCHIVES

pytestmark = pytest.mark.unit


async def test_reads_and_streams_exact_ranges(tmp_path) -> None:
    path = tmp_path / "blob"
    content = os.urandom(100_003)
    path.write_bytes(content)
    source = await LocalFileSource.open(path)
    try:
        assert source.size == len(content)
        assert await source.read(5, 70_000) == content[5:70_000]
        assert await source.read(7, 7) == b""
        chunks = [c async for c in source.stream(3, 100_000, chunk_size=4096)]
        assert b"".join(chunks) == content[3:100_000]
        assert max(map(len, chunks)) == 4096
        assert source.stats.requests == 2 + len(chunks)
        with pytest.raises(ValueError):
            await source.read(0, len(content) + 1)
        early = source.stream(0, len(content), chunk_size=1000)
        assert await anext(early) == content[:1000]
        await early.aclose()  # abandoning a stream early leaves nothing running
    finally:
        await source.close()


async def test_read_into_fills_small_buffers_inline_and_big_ones_in_the_executor(tmp_path) -> None:
    """A big copy inline would hold the event loop for its whole length, as `read` avoids too."""
    path = tmp_path / "blob"
    content = os.urandom(3 << 20)
    path.write_bytes(content)
    source = await LocalFileSource.open(path)
    try:
        small = bytearray(4096)
        await source.read_into(10, memoryview(small))
        assert small == content[10:4106]
        big = bytearray(INLINE_READ_LIMIT + 1)
        filling = asyncio.create_task(source.read_into(5, memoryview(big)))
        await asyncio.sleep(0)
        assert source._holders == 1  # the read waits on the executor, not on the loop
        await filling
        assert big == content[5 : 5 + len(big)]
        with pytest.raises(ValueError):
            await source.read_into(len(content) - 1, memoryview(bytearray(2)))
    finally:
        await source.close()


async def test_close_waits_for_reads_in_the_executor_then_refuses_reads(tmp_path) -> None:
    path = tmp_path / "blob"
    content = os.urandom(8 << 20)  # above the inline limit: read in the executor
    path.write_bytes(content)
    source = await LocalFileSource.open(path)
    reading = asyncio.create_task(source.read(0, len(content)))
    await asyncio.sleep(0)  # the read now waits on the executor
    await source.close()
    os.fstat(source._fd)  # still open: its number cannot go to another file mid-read
    assert await reading == content
    assert source._fd == -1  # released as the read returned
    with pytest.raises(reader.SourceError, match="closed"):
        await source.read(0, 10)
    with pytest.raises(reader.SourceError, match="closed"):
        await anext(source.stream(0, 10))
    await source.close()  # twice is fine


async def test_missing_and_non_regular_files_are_source_errors(tmp_path) -> None:
    with pytest.raises(reader.SourceError, match="cannot open"):
        await reader.open_archive(tmp_path / "absent.pt2")
    with pytest.raises(reader.SourceError):
        await reader.open_archive(tmp_path)


async def test_file_truncated_under_a_read_is_source_changed(tmp_path) -> None:
    path = tmp_path / "shrinking.pt2"
    shutil.copy(ARCHIVES / "many.pt2", path)
    async with reader.open_archive(path) as ar:
        name = ar.tensors()[-1].name  # its payload lies far beyond the cut
        with open(path, "r+b") as handle:
            handle.truncate(1000)
        with pytest.raises(reader.SourceChanged):
            await ar.read(name)


async def test_open_takes_few_reads_and_a_small_share_of_the_file() -> None:
    async with reader.open_archive(ARCHIVES / "many.pt2", tail_size=16 << 10) as ar:
        # tail, then the rest of an 80 KiB central directory, then the configs in two
        # parallel reads (weights + constants configs are adjacent; archive_format etc. lie
        # 350 KiB away): 3 sequential round trips, 4 reads
        assert ar.stats["open"]["requests"] == 4
        assert "data" not in ar.stats
        size = os.path.getsize(ARCHIVES / "many.pt2")
        assert ar.stats["open"]["bytes"] < size / 2
    async with reader.open_archive(ARCHIVES / "many.pt2") as ar:
        # a local file's default tail is 64 KiB (one more read costs microseconds, a bigger
        # buffer costs page faults): the 80 KiB directory takes a second read, as above
        assert ar.stats["open"]["requests"] == 4
        assert ar.stats["open"]["bytes"] < 400_000
        await ar.read(ar.tensors()[5].name)
        assert ar.stats["data"]["requests"] == 1  # header and data in one read
    async with reader.open_archive(BytesSource((ARCHIVES / "many.pt2").read_bytes())) as ar:
        # any other source gets the remote default, 256 KiB: it holds the whole directory
        assert ar.stats["open"]["requests"] <= 2


async def test_archive_span_is_where_the_bytes_lie_in_the_file() -> None:
    path = ARCHIVES / "layouts.pt2"
    async with reader.open_archive(path) as ar:
        tensor = ar.tensor("view_b")  # a view into a shared payload, at a storage offset
        start, end = await tensor.archive_span()
        assert path.read_bytes()[start:end] == await tensor.read()
        with pytest.raises(ValueError):
            await ar.tensor("strided").archive_span()  # gathered, not a run of the file's bytes


@pytest.mark.parametrize("order", ["default", "contiguous"])
async def test_read_range_equals_a_slice_of_read(order: str) -> None:
    async with reader.open_archive(ARCHIVES / "layouts.pt2") as ar:
        for info in ar.tensors():
            if not info.readable:
                continue
            tensor = ar.tensor(info.name, order=order)
            whole = await tensor.read()
            for start, end in ((0, tensor.length), (1, tensor.length), (0, tensor.length // 2)):
                start, end = (
                    min(start, tensor.length),
                    max(min(end, tensor.length), min(start, tensor.length)),
                )
                assert await tensor.read_range(start, end) == whole[start:end], (info.name, start, end)
        with pytest.raises(ValueError):
            await ar.tensor("transposed").read_range(0, 10**6)
