"""s3:// and plain-HTTP URLs against a real S3 server (SeaweedFS on loopback): same index and bytes
as the local reader, SigV4 with credentials, anonymous reads of a public bucket, presigned URLs."""

from __future__ import annotations

import pytest

import reader
from reader.sources import S3Settings
from testing.compare import same_as_fixture as _same_as_local
from testing.paths import ARCHIVES
from testing.seaweed import SeaweedS3

pytestmark = pytest.mark.emulator

NAMES = ["layouts.pt2", "dtypes.pt2", "many.pt2", "many_deflate.pt2", "two_models.pt2"]


@pytest.fixture(scope="module")
def uploaded(seaweed_s3: SeaweedS3) -> SeaweedS3:
    for name in NAMES:
        for bucket in (seaweed_s3.private_bucket, seaweed_s3.public_bucket):
            seaweed_s3.upload(bucket, f"archives/{name}", ARCHIVES / name)
    return seaweed_s3


def _settings(server: SeaweedS3, *, anonymous: bool = False) -> S3Settings:
    if anonymous:
        return S3Settings(region=server.region, endpoint=server.endpoint)
    return S3Settings(
        region=server.region,
        endpoint=server.endpoint,
        access_key=server.access_key,
        secret_key=server.secret_key,
    )


@pytest.mark.parametrize("name", NAMES)
async def test_signed_s3_reads_equal_local(uploaded: SeaweedS3, name: str) -> None:
    location = f"s3://{uploaded.private_bucket}/archives/{name}"
    async with reader.open_archive(location, tail_size=8192, s3_settings=_settings(uploaded)) as ar:
        assert ar.source.location == location
        await _same_as_local(ar, name)


async def test_anonymous_s3_reads_a_public_bucket_only(uploaded: SeaweedS3) -> None:
    anonymous = _settings(uploaded, anonymous=True)
    public = f"s3://{uploaded.public_bucket}/archives/layouts.pt2"
    async with reader.open_archive(public, s3_settings=anonymous) as ar:
        await _same_as_local(ar, "layouts.pt2")
    with pytest.raises(reader.SourceError, match="access denied"):
        await reader.open_archive(
            f"s3://{uploaded.private_bucket}/archives/layouts.pt2", s3_settings=anonymous
        )


async def test_credentials_and_endpoint_come_from_the_environment(uploaded: SeaweedS3, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", uploaded.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", uploaded.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", uploaded.secret_key)
    monkeypatch.setenv("AWS_REGION", uploaded.region)
    async with reader.open_archive(f"s3://{uploaded.private_bucket}/archives/two_models.pt2") as ar:
        assert ar.models == ["decoder", "encoder"]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(reader.SourceError, match="HTTP 403"):
        await reader.open_archive(f"s3://{uploaded.private_bucket}/archives/two_models.pt2")


async def test_open_is_two_requests_and_a_tensor_one_more(uploaded: SeaweedS3) -> None:
    location = f"s3://{uploaded.private_bucket}/archives/many.pt2"
    async with reader.open_archive(location, s3_settings=_settings(uploaded)) as ar:
        assert ar.stats["open"]["requests"] == 2
        await ar.read(ar.tensors()[100].name)
        assert ar.stats["data"]["requests"] == 1


async def test_plain_http_and_presigned_urls(uploaded: SeaweedS3) -> None:
    public_url = uploaded.url(uploaded.public_bucket, "archives/dtypes.pt2")
    async with reader.open_archive(public_url, tail_size=4096) as ar:
        await _same_as_local(ar, "dtypes.pt2")
    presigned = uploaded.client().generate_presigned_url(
        "get_object",
        Params={"Bucket": uploaded.private_bucket, "Key": "archives/many_deflate.pt2"},
        ExpiresIn=600,
    )
    async with reader.open_archive(presigned, tail_size=4096) as ar:
        assert "Signature" not in ar.source.location
        await _same_as_local(ar, "many_deflate.pt2")


async def test_object_replaced_under_a_read(uploaded: SeaweedS3) -> None:
    key = "archives/replaced.pt2"
    uploaded.upload(uploaded.private_bucket, key, ARCHIVES / "many.pt2")
    location = f"s3://{uploaded.private_bucket}/{key}"
    async with reader.open_archive(location, tail_size=8192, s3_settings=_settings(uploaded)) as ar:
        assert await ar.revalidate()
        uploaded.upload(uploaded.private_bucket, key, ARCHIVES / "many_deflate.pt2")
        assert not await ar.revalidate()
        with pytest.raises(reader.SourceChanged):
            await ar.read(ar.tensors()[3].name)


async def test_the_scheme_is_read_in_any_case(uploaded: SeaweedS3) -> None:
    location = f"S3://{uploaded.private_bucket}/archives/two_models.pt2"
    async with reader.open_archive(location, s3_settings=_settings(uploaded)) as ar:
        await _same_as_local(ar, "two_models.pt2")
