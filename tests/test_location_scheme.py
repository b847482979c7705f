"""A location's scheme is case-insensitive everywhere (RFC 3986 3.1): one split
(reader.sources.split_location) behind the router, each store's parser, the cache key, the Hub's
offline switch, a sharded index's shard locations and the service's open patterns."""

from __future__ import annotations

import pytest

import reader
from app.open_patterns import Patterns, parse_hub
from reader.archives.sharded.index import shard_location
from reader.cache import offline_for
from reader.cache.keys import cache_key
from reader.sources import Location, is_remote, open_source, split_location
from reader.sources.azure import parse_az_location
from reader.sources.gcs import parse_gs_location
from reader.sources.hf import parse_hf_location
from reader.sources.s3 import parse_s3_location

pytestmark = pytest.mark.unit


def test_the_split() -> None:
    assert split_location("S3://Bucket/Key") == Location("s3", "Bucket/Key")
    assert split_location("model.pt2") == Location("", "model.pt2")
    assert split_location("/srv/a://b") == Location("/srv/a", "b")  # what the router then refuses


@pytest.mark.parametrize(
    "parse, location, expected",
    [
        (parse_s3_location, "S3://bucket/key", ("bucket", "key")),
        (parse_gs_location, "Gs://bucket/object", ("bucket", "object")),
        (parse_az_location, "AZ://container/blob", ("container", "blob")),
    ],
)
def test_each_store_parses_any_case(parse, location, expected) -> None:
    assert parse(location) == expected == parse(location.lower())


def test_the_hub_parses_any_case_and_the_service_splits_alike() -> None:
    assert parse_hf_location("HF://org/model@v1/a/b.pt2") == parse_hf_location("hf://org/model@v1/a/b.pt2")
    assert parse_hub("HF://org/model@v1/a/b.pt2") == parse_hf_location("hf://org/model@v1/a/b.pt2")


def test_remote_cache_key_and_offline(monkeypatch) -> None:
    assert all(is_remote(f"{s}://b/k") for s in ("S3", "Gs", "AZ", "HF", "HTTPS", "Http"))
    assert cache_key("HTTPS://host/m.pt2?X-Amz-Signature=s&v=1") == cache_key("https://host/m.pt2?v=1")
    monkeypatch.delenv("PT2SERVE_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert offline_for("HF://org/model/m.pt2", None) is True


def test_a_sharded_index_keeps_its_location_s_scheme() -> None:
    assert shard_location("HTTPS://h/m/index.json?t=1", "a b.pt2") == "HTTPS://h/m/a%20b.pt2?t=1"


def test_the_open_patterns_admit_any_case() -> None:
    patterns = Patterns(["s3://team/**", "hf://org/*"])
    assert patterns.admits("s3", "S3://team/m.pt2") and patterns.admits("hf", "HF://org/model/m.pt2")


async def test_an_unknown_scheme_is_still_a_location_error() -> None:
    with pytest.raises(reader.LocationError, match="unsupported location scheme 'ftp'"):
        await open_source("FTP://host/m.pt2")
