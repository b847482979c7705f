"""Slices through the library over the network: `read_numpy(name, index=...)` equals NumPy's
`full[index]` on every fixture over HTTP and from S3, and column blocks over HTTP read only their byte
runs. The local checks are in test_slices_rules.py."""

from __future__ import annotations

import numpy as np
import pytest

import reader
from reader.pt2 import slicing
from reader.sources import HttpOptions, S3Settings
from testing import slice_cases
from testing.faultserver import FaultServer
from testing.paths import ARCHIVES
from testing.seaweed import SeaweedS3
from testing.slice_cases import (
    FIXTURES,
    ROWS,
    check_fixture,
    header_guess,
    same,
)

embedding = slice_cases.embedding  # the fixture: a 4 MiB embedding archive and its array

pytestmark = pytest.mark.emulator


FAST = HttpOptions(backoff_base=0.01, backoff_cap=0.05, read_timeout=5.0, time_budget=20.0)


async def test_fixed_slices_equal_numpy_over_http() -> None:
    async with FaultServer() as server:
        for fixture in FIXTURES:
            server.put("/" + fixture, (ARCHIVES / fixture).read_bytes())
            async with reader.open_archive(
                server.url("/" + fixture), tail_size=4096, http_options=FAST
            ) as ar:
                await check_fixture(ar, fixture, tensors=12)
        assert not server.errors


async def test_fixed_slices_equal_numpy_from_s3(seaweed_s3: SeaweedS3) -> None:
    settings_ = S3Settings(
        region=seaweed_s3.region,
        endpoint=seaweed_s3.endpoint,
        access_key=seaweed_s3.access_key,
        secret_key=seaweed_s3.secret_key,
    )
    for fixture in FIXTURES:
        seaweed_s3.upload(seaweed_s3.private_bucket, f"slices/{fixture}", ARCHIVES / fixture)
        location = f"s3://{seaweed_s3.private_bucket}/slices/{fixture}"
        async with reader.open_archive(location, tail_size=8192, s3_settings=settings_) as ar:
            await check_fixture(ar, fixture, tensors=12)


async def test_column_blocks_over_http_read_their_runs_only(embedding) -> None:
    path, full = embedding
    async with FaultServer() as server:
        server.put("/emb.pt2", path.read_bytes())
        async with reader.open_archive(server.url("/emb.pt2"), http_options=FAST) as ar:
            # every 256th row's first 16 columns: runs 512 KiB apart, each its own range
            index = np.s_[::256, :16]
            plan = slicing.plan_slice(ar.layout("emb"), index)
            assert len(plan.runs) == ROWS // 256
            same(await ar.read_numpy("emb", index=index), full[index])
            data = ar.stats["data"]
            assert data["bytes"] <= plan.read_bytes + header_guess(ar, "emb")
            assert data["requests"] == len(plan.runs) + 1  # the local header first
        assert not server.errors
