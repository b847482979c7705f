"""Zero-copy local reads in the library (reader.bodies.verified, reader.formats.runs), in this process:
a verified entry is read without a CRC pass and never a changed one; a flipped byte fails every read.
Serving with sendfile(2) under a real uvicorn is in test_zero_copy.py."""

from __future__ import annotations

import os

import pytest

import reader
from reader.bodies.verified import is_verified
from testing import big_payload
from testing.big_payload import BIG, payload_offset
from testing.zipbytes import write_pt2

big_archive = big_payload.big_archive  # the fixture: the archive and its 8 MiB payload

pytestmark = pytest.mark.unit


async def test_the_library_reads_a_verified_entry_without_a_crc_pass_and_never_a_changed_one(
    big_archive,
) -> None:
    path, payload = big_archive
    async with reader.open_archive(path) as ar:
        tensor = ar.tensor("big")
        assert not is_verified(tensor.fetcher, tensor.entry)
        assert await ar.read("big") == payload  # CRC-checked: verified now
        assert is_verified(tensor.fetcher, tensor.entry)
        buffer = bytearray(BIG)
        await ar.tensor("big").read_into(buffer)
        assert buffer == payload
        assert b"".join([bytes(c) async for c in ar.tensor("big").chunks(chunk_size=1 << 20)]) == payload
        with open(path, "r+b") as rewrite:  # in place, same bytes at first: then other bytes
            rewrite.seek(payload_offset(path, payload))
            rewrite.write(b"\0" * 16)
        status = os.stat(path)
        os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000))
        for read in (
            ar.read("big"),
            ar.tensor("big").read_into(bytearray(BIG)),
            _joined(ar.tensor("big").chunks(chunk_size=1 << 20)),
        ):
            with pytest.raises(reader.SourceChanged):
                await read


async def test_a_flipped_byte_fails_every_library_read(tmp_path) -> None:
    path = tmp_path / "flipped.pt2"
    payload = os.urandom(1 << 20)
    write_pt2(path, {"w": (7, [1 << 18], payload)})
    data = bytearray(path.read_bytes())
    data[payload_offset(path, payload) + 777] ^= 0x80
    path.write_bytes(data)
    async with reader.open_archive(path) as ar:
        for _ in range(2):  # a failed check verifies nothing: the second round fails the same
            with pytest.raises(reader.IntegrityError):
                await ar.read("w")
            with pytest.raises(reader.IntegrityError):
                await ar.tensor("w").read_into(bytearray(1 << 20))
            with pytest.raises(reader.IntegrityError):
                await _joined(ar.tensor("w").chunks(chunk_size=64 << 10))
        assert not is_verified(ar.tensor("w").fetcher, ar.tensor("w").entry)


async def _joined(chunks) -> bytes:
    return b"".join([bytes(chunk) async for chunk in chunks])
