"""`read_into`: a tensor's bytes into the caller's buffer are exactly what `read` and `read_range`
give, from every kind of source, with the same checks (CRC-32 of whole entries, ranges, sizes)."""

from __future__ import annotations

import numpy as np
import pytest

import reader
from reader.sources import BytesSource, HttpOptions
from testing.faultserver import FaultServer
from testing.paths import ARCHIVES

pytestmark = pytest.mark.emulator

FIXTURES = ["layouts.pt2", "dtypes.pt2", "many_deflate.pt2", "two_models.pt2", "zero_payload.pt2"]
FAST = HttpOptions(backoff_base=0.01, backoff_cap=0.05, read_timeout=2.0, time_budget=10.0)


async def _agrees_with_read(ar: reader.Archive) -> int:
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


@pytest.mark.parametrize("name", FIXTURES)
async def test_local_and_in_memory_reads_into_buffers_equal_read(name: str) -> None:
    async with reader.open_archive(ARCHIVES / name) as local:
        assert await _agrees_with_read(local) > 0
    async with reader.open_archive(BytesSource((ARCHIVES / name).read_bytes())) as held:
        assert await _agrees_with_read(held) > 0


async def test_remote_reads_into_buffers_equal_read() -> None:
    async with FaultServer() as server:
        for name in ("layouts.pt2", "many_deflate.pt2"):
            server.put("/" + name, (ARCHIVES / name).read_bytes())
            async with reader.open_archive(server.url("/" + name), tail_size=4096, http_options=FAST) as ar:
                assert await _agrees_with_read(ar) > 0
        assert not server.errors


async def test_the_archive_written_by_another_torch_build_reads_into_a_buffer(shared_linear) -> None:
    async with reader.open_archive(shared_linear) as ar:
        assert await _agrees_with_read(ar) > 0


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


@pytest.mark.parametrize("parts", [1, 4])
async def test_landed_hears_of_every_byte_once_across_parts_and_resumes(parts: int) -> None:
    """HttpSource.read_into(landed=...) reports spans that tile the range exactly, each after its
    bytes are in the buffer, also when a part is cut mid-body and resumed."""
    from testing.faultserver import DropAfter

    payload = np.random.default_rng(3).integers(0, 256, 6 << 20, dtype=np.uint8).tobytes()
    options = HttpOptions(
        parallel_parts=parts, part_size=1 << 20, parallel_above=1 << 20, fast_connection=None,
        backoff_base=0.01, backoff_cap=0.05, max_attempts=4,
    )  # fmt: skip
    async with FaultServer() as server:
        server.put("/blob", payload)
        source = await reader.sources.HttpSource.open(server.url("/blob"), tail_size=1024, options=options)
        try:
            server.faults.append(DropAfter(nbytes=300_000, after=parts // 2, method="GET"))
            buffer = np.zeros(len(payload) - 1000, dtype=np.uint8)
            spans: list[tuple[int, int]] = []

            def landed(at: int, nbytes: int) -> None:
                assert buffer[at - 500 : at - 500 + nbytes].tobytes() == payload[at : at + nbytes]
                spans.append((at, nbytes))

            await source.read_into(500, memoryview(buffer), landed=landed)
        finally:
            await source.close()
        assert server.faults[0].applied == 1
    assert buffer.tobytes() == payload[500:-500]
    covered = np.zeros(len(payload), dtype=np.int32)
    for at, nbytes in spans:
        covered[at : at + nbytes] += 1
    assert (covered[500:-500] == 1).all() and not covered[:500].any() and not covered[-500:].any()
