"""Versions of a remote archive (issue 13): ETags, Repr-Digest and an update behind an unversioned URL,
with the archive on a loopback HTTP server. The in-process checks are in test_versions_rules.py."""

from __future__ import annotations

import pytest

import reader
from testing.checks import sha256_field
from testing.service import in_process, make_app
from testing.versioned_archives import CHANGED, write_version

pytestmark = pytest.mark.emulator


@pytest.fixture(scope="module")
def wide_versions(tmp_path_factory):
    """512 wide: the changed weight (1 MiB) lies outside the tail an HTTP source keeps from its open."""
    pytest.importorskip("torch", reason="torch writes the two archive versions")
    out = tmp_path_factory.mktemp("wide")
    return tuple(write_version(out / f"v{n}" / "net.pt2", n, width=512) for n in (1, 2))


async def test_remote_archive_etags_and_an_update_under_an_unversioned_request(wide_versions) -> None:
    """Remote and larger than PT2SERVE_DIGEST_INLINE_MAX: no digest before the headers (it would
    read the tensor twice), so a version-scoped ETag until the manifest computes the digest; then a
    content ETag on unversioned URLs only (versioned ones must agree across replicas). When the
    object is replaced, an unversioned request is answered from the new version, not with a 503."""
    from testing.faultserver import FaultServer

    first, second = wide_versions
    name = CHANGED[0]
    async with FaultServer() as upstream:
        upstream.put("/net.pt2", first.read_bytes())
        app = make_app([f"net={upstream.url('/net.pt2')}"], digest_inline_max=1024)
        async with in_process(app) as client:
            url = f"/archives/net/tensors/{name}/data"
            before = await client.get(url)
            assert before.status_code == 200 and "repr-digest" not in before.headers
            pinned_url = before.headers["content-location"]
            pinned = await client.get(pinned_url)
            assert pinned.headers["etag"] == before.headers["etag"]  # version-scoped, the same on both
            manifest = (await client.get("/archives/net/manifest")).json()
            after = await client.get(url)
            assert after.headers["repr-digest"] == sha256_field(after.content)
            assert after.headers["etag"] != before.headers["etag"]  # now a content ETag
            pinned = await client.get(pinned_url)
            assert pinned.headers["repr-digest"] == after.headers["repr-digest"]
            assert pinned.headers["etag"] == before.headers["etag"]  # replica-independent
            small = next(e for e in manifest["tensors"] if e["nbytes"] <= 1024)  # digested inline
            response = await client.get(f"/archives/net/tensors/{small['name']}/data")
            assert response.headers["repr-digest"] == sha256_field(response.content)

            upstream.put("/net.pt2", second.read_bytes())  # a deploy: the next read sees a new ETag
            replaced = await client.get(url)
            assert replaced.status_code == 200, replaced.text
            async with reader.open_archive(second) as ar:
                assert replaced.content == await ar.read(name)
            assert replaced.headers["content-location"] != pinned_url
            gone = await client.get(pinned_url)  # the old object is gone from the origin
            assert gone.status_code == 410 and gone.json()["error"]["code"] == "version_gone"
