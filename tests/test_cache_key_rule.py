"""The rule of reader/cache/keys.py on its own: which parts of a location name the object (kept),
which are a signature's (left out); other credentials may name the object too, and are written only
as part of a digest."""

from __future__ import annotations

import pytest

from reader.cache.keys import cache_key, key_digest
from reader.sources import redact_location

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("http://h/dl?f=a.pt2", "http://h/dl?f=b.pt2"),
        ("https://h/m.pt2?versionId=1", "https://h/m.pt2?versionId=2"),
        ("https://h/m.pt2?versionId=1", "https://h/m.pt2"),
        ("http://h/dl?token=one", "http://h/dl?token=two"),  # a download token may pick the object
        ("http://alice:pw@h/m.pt2", "http://bob:pw@h/m.pt2"),
        ("http://h/dl?sp=a", "http://h/dl?sp=b"),  # Azure's names, without a SAS: ordinary parameters
        ("s3://b/m.pt2?versionId=1", "s3://b/m.pt2"),
        ("s3://b/m.pt2#1", "s3://b/m.pt2"),
        ("gs://b/m.pt2?generation=1", "gs://b/m.pt2"),
        ("hf://gpt2@main/model.pt2", "hf://other@main/model.pt2"),
        ("hf://org/repo@v1/model.pt2", "hf://org/repo@v2/model.pt2"),
    ],
)
def test_two_objects_have_two_keys(one, other):
    assert cache_key(one) != cache_key(other)


@pytest.mark.parametrize(
    ("location", "key"),
    [
        (
            "https://h/m.pt2?X-Amz-Credential=AKIA&X-Amz-Signature=abc&x-amz-security-token=t",
            "https://h/m.pt2",
        ),
        ("https://h/m.pt2?versionId=7&X-Amz-Signature=abc", "https://h/m.pt2?versionId=7"),
        (
            "https://h/m.pt2?X-Goog-Signature=abc&X-Goog-Expires=60&userProject=p",
            "https://h/m.pt2?userProject=p",
        ),
        ("https://a.blob/c/m.pt2?sv=2024&se=2030&sp=r&sr=b&sig=abc%3D", "https://a.blob/c/m.pt2"),
        ("https://a.blob/c/m.pt2?snapshot=2024&sv=2024&sig=abc", "https://a.blob/c/m.pt2?snapshot=2024"),
        ("https://h/m.pt2?AWSAccessKeyId=AKIA&Expires=1&Signature=abc", "https://h/m.pt2"),
        (
            "https://d.cloudfront.net/m.pt2?Expires=1&Signature=abc&Key-Pair-Id=K",
            "https://d.cloudfront.net/m.pt2",
        ),
        ("http://h/m.pt2#part", "http://h/m.pt2"),
        ("http://h/dl?b=2&a=1", "http://h/dl?b=2&a=1"),  # byte for byte: never two objects made one
        ("s3://b/k?versionId=1", "s3://b/k?versionId=1"),
    ],
)
def test_signatures_and_fragments_are_left_out(location, key):
    assert cache_key(location) == key


@pytest.mark.parametrize(
    "location", ["http://h/dl?f=a&token=s3cr3t", "http://u:s3cr3t@h/m.pt2", "http://h/m?API_KEY=s3cr3t"]
)
def test_other_credentials_may_name_the_object_and_are_written_only_as_a_digest(location):
    assert cache_key(location) == location
    assert "s3cr3t" not in key_digest(cache_key(location))
    assert key_digest(cache_key(location)) != key_digest(cache_key(location.replace("s3cr3t", "other")))


def test_hub_locations_are_shown_with_their_repository():
    assert redact_location("hf://gpt2@main/model.pt2") == "hf://gpt2@main/model.pt2"
    assert redact_location("https://u:pw@h/m.pt2?sig=x#f") == "https://h/m.pt2"
