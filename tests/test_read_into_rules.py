"""`read_into` from local files and memory: a tensor's bytes into the caller's buffer are exactly what
`read` and `read_range` give, with the same checks (CRC-32 of whole entries, ranges, sizes), and
wrong buffers are refused with typed errors. No socket, no subprocess; the remote sources are in
test_read_into.py."""

from __future__ import annotations

import numpy as np
import pytest

import reader
from reader.sources import BytesSource
from testing.paths import ARCHIVES
from testing.read_into_checks import agrees_with_read

pytestmark = pytest.mark.unit


FIXTURES = ["layouts.pt2", "dtypes.pt2", "many_deflate.pt2", "two_models.pt2", "zero_payload.pt2"]


@pytest.mark.parametrize("name", FIXTURES)
async def test_local_and_in_memory_reads_into_buffers_equal_read(name: str) -> None:
    async with reader.open_archive(ARCHIVES / name) as local:
        assert await agrees_with_read(local) > 0
    async with reader.open_archive(BytesSource((ARCHIVES / name).read_bytes())) as held:
        assert await agrees_with_read(held) > 0


async def test_the_archive_written_by_another_torch_build_reads_into_a_buffer(shared_linear) -> None:
    async with reader.open_archive(shared_linear) as ar:
        assert await agrees_with_read(ar) > 0


async def test_a_corrupt_stored_entry_fails_its_crc_through_read_into(tmp_path) -> None:
    """The first read finds the data offset through `read`; the second goes straight into the
    buffer. Both must refuse the whole entry's bytes."""
    data = bytearray((ARCHIVES / "layouts.pt2").read_bytes())
    async with reader.open_archive(ARCHIVES / "layouts.pt2") as clean:
        info = next(t for t in clean.tensors() if t.readable and t.dense and t.nbytes)
        entry = clean.tensor(info.name, model=info.model).entry
        first, _ = await clean.tensor(info.name, model=info.model).archive_span()
        whole_entry = info.nbytes == entry.size
    assert whole_entry, "the test needs a tensor that covers its whole entry (its CRC-32 is checked)"
    data[first] ^= 0xFF
    path = tmp_path / "corrupt.pt2"
    path.write_bytes(bytes(data))
    async with reader.open_archive(path) as ar:
        for _ in range(2):
            with pytest.raises(reader.IntegrityError, match="CRC-32"):
                await ar.tensor(info.name, model=info.model).read_into(np.empty(info.nbytes, dtype=np.uint8))


async def test_wrong_buffers_are_refused_with_typed_errors() -> None:
    async with reader.open_archive(ARCHIVES / "layouts.pt2") as ar:
        info = next(t for t in ar.tensors() if t.readable and t.nbytes)
        tensor = ar.tensor(info.name, model=info.model)
        with pytest.raises(ValueError, match="outside"):
            await tensor.read_into(bytearray(info.nbytes + 1))
        with pytest.raises(TypeError, match="read-only"):
            await tensor.read_into(bytes(info.nbytes))
        with pytest.raises(ValueError, match="outside"):
            await tensor.read_into(bytearray(2), info.nbytes - 1)
