"""S3 credentials and settings resolved without a network: explicit settings ignore the environment, a
broken configuration is a SourceError, and addressing style, region and endpoint are taken as
configured. The credential chain against moto's endpoints is in test_aws_credentials.py."""

from __future__ import annotations

import pathlib
import re

import pytest

import reader
from reader.sources.s3 import S3Settings, resolve
from testing import clean_aws

aws_env = clean_aws.aws_env  # the fixture: no AWS_* variables, empty files, no instance metadata

pytestmark = pytest.mark.unit


def test_addressing_style_region_and_endpoint_as_configured(
    aws_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_NO_SIGN_REQUEST", "1")  # no credential search: only the URL is wanted
    (aws_env / "config").write_text(
        "[default]\nregion = eu-west-2\n"
        "[profile virtual]\nendpoint_url = http://store.example.test\ns3 =\n  addressing_style = virtual\n"
        "[profile path]\nendpoint_url = http://store.example.test\n"
    )
    assert resolve("s3://bucket/a b.pt2", None)[0] == "https://bucket.s3.eu-west-2.amazonaws.com/a%20b.pt2"
    monkeypatch.setenv("AWS_REGION", "ap-south-1")  # AWS_REGION first, as the AWS CLI v2 and SDKs read it
    assert resolve("s3://bucket/k", None)[0] == "https://bucket.s3.ap-south-1.amazonaws.com/k"
    monkeypatch.setenv("AWS_PROFILE", "virtual")
    assert resolve("s3://bucket/k", None)[0] == "http://bucket.store.example.test/k"
    monkeypatch.setenv("AWS_PROFILE", "path")
    assert resolve("s3://bucket/k", None)[0] == "http://store.example.test/bucket/k"
    with pytest.raises(reader.LocationError):
        resolve("s3://bucket-only", None)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (None, "The config profile (absent) could not be found"),
        ("[default]\ns3 =\n  addressing_style = sideways\n", "addressing style sideways is invalid"),
        ("[default\nregion = us", "Unable to parse config file"),
    ],
)
async def test_a_broken_configuration_is_a_source_error(
    aws_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch, config: str | None, expected: str
) -> None:
    if config is None:
        monkeypatch.setenv("AWS_PROFILE", "absent")
    else:
        (aws_env / "config").write_text(config)
    with pytest.raises(reader.SourceError, match=re.escape(expected)):
        await reader.open_archive("s3://bucket/model.pt2")


def test_explicit_settings_ignore_the_environment(
    aws_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_PROFILE", "absent")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://elsewhere.example.test")
    monkeypatch.setenv("AWS_REGION", "sa-east-1")
    assert (
        resolve("s3://bucket/k", S3Settings(region="eu-west-1"))[0]
        == "https://bucket.s3.eu-west-1.amazonaws.com/k"
    )
    custom = S3Settings(endpoint="http://store.example.test")
    assert (
        resolve("s3://bucket/k", custom)[0] == "http://store.example.test/bucket/k"
    )  # path-style, as before
    virtual = S3Settings(endpoint="http://store.example.test", addressing_style="virtual")
    assert resolve("s3://bucket/k", virtual)[0] == "http://bucket.store.example.test/k"
    with pytest.raises(ValueError, match="sideways"):
        S3Settings(addressing_style="sideways")
