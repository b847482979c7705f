"""torch.save checkpoints and AOTInductor packages opened remotely (a loopback HTTP server, S3) list
and read what the same file gives locally, for every torch version whose fixtures are checked in.
The local checks against torch's truth are in test_containers_rules.py."""

from __future__ import annotations

import pytest

import reader
from testing.container_truth import TRUTH, cases
from testing.faultserver import FaultServer
from testing.paths import CONTAINER_VERSIONS as VERSIONS
from testing.paths import CONTAINERS

pytestmark = pytest.mark.emulator


@pytest.mark.parametrize(("version", "name"), [*cases("checkpoint"), *cases("aoti")])
async def test_remote_open_equals_local(version: str, name: str) -> None:
    path = CONTAINERS / version / name
    if TRUTH[version]["archives"][name].get("format", "aoti_pickle") != "aoti_pickle":
        return
    async with FaultServer() as server:
        server.put(f"/{name}", path.read_bytes())
        async with (
            reader.open_archive(server.url(f"/{name}"), tail_size=4096) as remote,
            reader.open_archive(path) as local,
        ):
            assert [t.to_dict() for t in remote.tensors()] == [t.to_dict() for t in local.tensors()]
            opened = remote.stats["open"]
            for info in local.tensors():
                if info.readable:
                    assert await remote.read(info.name, model=info.model) == await local.read(
                        info.name, model=info.model
                    )
    assert opened["bytes"] < path.stat().st_size or path.stat().st_size < 16384


@pytest.mark.parametrize("name", ["checkpoint.pt", "aoti_pickle.pt2"])
async def test_s3_open_equals_local(seaweed_s3, name: str) -> None:
    from reader.sources import S3Settings

    path = CONTAINERS / VERSIONS[-1] / name
    seaweed_s3.upload(seaweed_s3.private_bucket, f"containers/{name}", path)
    settings = S3Settings(
        region=seaweed_s3.region,
        endpoint=seaweed_s3.endpoint,
        access_key=seaweed_s3.access_key,
        secret_key=seaweed_s3.secret_key,
    )
    location = f"s3://{seaweed_s3.private_bucket}/containers/{name}"
    async with (
        reader.open_archive(location, s3_settings=settings) as remote,
        reader.open_archive(path) as local,
    ):
        assert remote.container == local.container
        assert [t.to_dict() for t in remote.tensors()] == [t.to_dict() for t in local.tensors()]
        for info in local.tensors():
            if info.readable:
                assert await remote.read(info.name, model=info.model, order="contiguous") == await local.read(
                    info.name, model=info.model, order="contiguous"
                )
