"""An archive with one 8 MiB random payload beside a small tensor (the fixture big_archive), and where the
payload starts in the file, for the zero-copy tests that flip or rewrite its bytes."""

from __future__ import annotations

import os

import pytest

from testing.zipbytes import write_pt2

BIG = 8 << 20


@pytest.fixture
def big_archive(tmp_path):
    path = tmp_path / "big.pt2"
    payload = os.urandom(BIG)
    write_pt2(path, {"big": (7, [BIG // 4], payload), "small": (7, [4, 4], os.urandom(64))})
    return path, payload


def payload_offset(path, payload: bytes) -> int:
    data = path.read_bytes()
    at = data.find(payload[:4096])
    assert at > 0
    return at
