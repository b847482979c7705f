"""reader.digests: SHA-256 per tensor (cached, shared, cancel-safe); versions from an ETag:
test_digests_http.py."""

from __future__ import annotations

import asyncio
import base64
import hashlib

import pytest

import reader
from reader.digests import Digests, repr_digest, sha256_of
from testing.paths import ARCHIVES

pytestmark = pytest.mark.unit


async def test_tensor_digests_are_the_sha256_of_what_read_returns() -> None:
    async with reader.open_archive(ARCHIVES / "layouts.pt2") as ar:
        digests = Digests(ar)
        for info in ar.tensors():
            if not info.readable:
                continue
            for order in ("default", "contiguous"):
                expected = hashlib.sha256(await ar.read(info.name, order=order)).digest()
                assert await digests.tensor(info, order) == expected, (info.name, order)
        assert repr_digest(expected) == f"sha-256=:{base64.b64encode(expected).decode()}:"


async def test_concurrent_askers_share_one_computation_and_a_leaving_one_does_not_stop_it() -> None:
    async with reader.open_archive(ARCHIVES / "dtypes.pt2") as ar:
        info = max((t for t in ar.tensors() if t.readable), key=lambda t: t.nbytes)
        digests = Digests(ar)
        leaving = asyncio.ensure_future(digests.tensor(info))
        await asyncio.sleep(0)
        leaving.cancel()
        results = await asyncio.gather(*(digests.tensor(info) for _ in range(5)))
        assert len(set(results)) == 1
        assert results[0] == hashlib.sha256(await ar.read(info.name)).digest()
        assert digests.bytes_hashed == info.nbytes  # read and hashed once
        with pytest.raises(asyncio.CancelledError):
            await leaving


async def test_a_failed_computation_is_not_cached() -> None:
    digests = Digests(None)  # type: ignore[arg-type] - `of` needs only the chunks it is given
    calls = 0

    async def chunks():
        nonlocal calls
        calls += 1
        yield b"abc"
        if calls == 1:
            raise reader.SourceError("cut")
        yield b"def"

    with pytest.raises(reader.SourceError):
        await digests.of("key", chunks)
    assert digests.cached("key") is None
    assert await digests.of("key", chunks) == hashlib.sha256(b"abcdef").digest()
    assert await digests.of("key", chunks) == hashlib.sha256(b"abcdef").digest() and calls == 2


async def test_sha256_of_large_chunks_off_the_loop() -> None:
    blocks = [bytes([i]) * (1 << 20) for i in range(3)]

    async def chunks():
        for block in blocks:
            yield memoryview(block)

    assert await sha256_of(chunks()) == hashlib.sha256(b"".join(blocks)).digest()
