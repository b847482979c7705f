"""What the real SeaweedFS S3 gateway does with the requests our HTTP/S3 source sends.

These pin server behaviour the source relies on (ranged GETs, suffix ranges, ETag/If-Match, anonymous
access to a public bucket). Facts seen with SeaweedFS 4.48 that are deliberately *not* asserted here:
``If-Range`` is ignored (a mismatching validator still gives 206, where AWS gives 200 + full body), and a
multi-range request (``bytes=0-1,5-6``) gets 200 with the whole object.
"""

from __future__ import annotations

import hashlib
import re

import httpx
import pytest

from testing.seaweed import SeaweedS3

pytestmark = pytest.mark.emulator

KEY = "facts/object.bin"
DATA = bytes(range(256)) * 4 + b"tail"  # 1028 bytes
SIZE = len(DATA)
MD5_ETAG = f'"{hashlib.md5(DATA).hexdigest()}"'
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def signed_get(server: SeaweedS3, url: str, headers: dict[str, str]) -> httpx.Response:
    """A GET signed with plain botocore SigV4 (no boto3 client), sent with httpx."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    req = AWSRequest(method="GET", url=url, headers={**headers, "x-amz-content-sha256": EMPTY_SHA256})
    SigV4Auth(Credentials(server.access_key, server.secret_key), "s3", server.region).add_auth(req)
    return httpx.get(url, headers=dict(req.headers.items()), timeout=10)


@pytest.fixture(scope="module")
def objects(seaweed_s3: SeaweedS3) -> dict[str, str]:
    """The same object uploaded (with credentials) to both buckets; bucket -> URL."""
    urls = {}
    for bucket in (seaweed_s3.private_bucket, seaweed_s3.public_bucket):
        assert seaweed_s3.upload(bucket, KEY, DATA) == MD5_ETAG
        urls[bucket] = seaweed_s3.url(bucket, KEY)
    return urls


@pytest.fixture
def private_url(objects, seaweed_s3):
    return objects[seaweed_s3.private_bucket]


@pytest.fixture
def public_url(objects, seaweed_s3):
    return objects[seaweed_s3.public_bucket]


def test_signed_suffix_range(seaweed_s3, private_url):
    r = signed_get(seaweed_s3, private_url, {"Range": "bytes=-100"})
    assert r.status_code == 206
    assert r.headers["content-range"] == f"bytes {SIZE - 100}-{SIZE - 1}/{SIZE}"
    assert r.headers["etag"] == MD5_ETAG  # quoted lowercase MD5 hex for a single PUT
    assert re.fullmatch(r'"[0-9a-f]{32}"', r.headers["etag"])
    assert r.content == DATA[-100:]


def test_suffix_longer_than_object_gives_whole_object_as_206(seaweed_s3, private_url):
    r = signed_get(seaweed_s3, private_url, {"Range": f"bytes=-{SIZE * 4}"})
    assert r.status_code == 206
    assert r.headers["content-range"] == f"bytes 0-{SIZE - 1}/{SIZE}"
    assert r.content == DATA


def test_range_end_past_end_is_clamped(seaweed_s3, private_url):
    r = signed_get(seaweed_s3, private_url, {"Range": f"bytes={SIZE - 10}-{SIZE + 1000}"})
    assert r.status_code == 206
    assert r.headers["content-range"] == f"bytes {SIZE - 10}-{SIZE - 1}/{SIZE}"
    assert r.content == DATA[-10:]


@pytest.mark.parametrize("first", [SIZE, SIZE + 1000])
def test_range_starting_at_or_past_end_is_416(seaweed_s3, private_url, first):
    r = signed_get(seaweed_s3, private_url, {"Range": f"bytes={first}-"})
    assert r.status_code == 416
    assert r.headers["content-range"] == f"bytes */{SIZE}"
    assert b"InvalidRange" in r.content


def test_unsigned_public_range(public_url):
    r = httpx.get(public_url, headers={"Range": "bytes=10-19"}, timeout=10)
    assert r.status_code == 206
    assert r.headers["content-range"] == f"bytes 10-19/{SIZE}"
    assert r.headers["etag"] == MD5_ETAG
    assert r.content == DATA[10:20]
    r = httpx.get(public_url, headers={"Range": "bytes=-4"}, timeout=10)
    assert (r.status_code, r.content) == (206, b"tail")


def test_unsigned_private_is_refused(seaweed_s3, private_url):
    r = httpx.get(private_url, headers={"Range": "bytes=0-9"}, timeout=10)
    assert r.status_code == 403
    assert b"AccessDenied" in r.content
    assert httpx.head(private_url, timeout=10).status_code == 403


def test_anonymous_identity_is_read_only(seaweed_s3, objects):
    public = f"{seaweed_s3.endpoint}/{seaweed_s3.public_bucket}"
    assert httpx.put(f"{public}/anonymous-write", content=b"x", timeout=10).status_code == 403
    assert httpx.get(f"{public}/", timeout=10).status_code == 403  # no anonymous listing
    assert httpx.get(f"{public}/no-such-key", timeout=10).status_code == 404


def test_if_match(seaweed_s3, private_url, public_url):
    wrong = {"Range": "bytes=0-9", "If-Match": '"0123456789abcdef0123456789abcdef"'}
    right = {"Range": "bytes=0-9", "If-Match": MD5_ETAG}
    r = signed_get(seaweed_s3, private_url, wrong)
    assert r.status_code == 412
    assert b"PreconditionFailed" in r.content
    r = signed_get(seaweed_s3, private_url, right)
    assert r.status_code == 206
    assert r.content == DATA[:10]
    assert httpx.get(public_url, headers=wrong, timeout=10).status_code == 412
    assert httpx.get(public_url, headers=right, timeout=10).status_code == 206


def test_multipart_etag_has_part_count(seaweed_s3):
    part = 5 * 1024 * 1024
    big = bytes(range(251)) * (2 * part // 251 + 1)  # 3 parts
    etag = seaweed_s3.upload(seaweed_s3.public_bucket, "facts/multipart.bin", big, part_size=part)
    assert re.fullmatch(r'"[0-9a-f]{32}-3"', etag)
    r = httpx.get(seaweed_s3.url(seaweed_s3.public_bucket, "facts/multipart.bin"),
                  headers={"Range": "bytes=-100"}, timeout=10)  # fmt: skip
    assert r.status_code == 206
    assert r.headers["etag"] == etag
    assert r.headers["content-range"] == f"bytes {len(big) - 100}-{len(big) - 1}/{len(big)}"
    assert r.content == big[-100:]
