"""reader.versions over HTTP: a source version from the ETag of a real loopback server (the pure digest
and version tests: test_digests.py)."""

from __future__ import annotations

import pytest

from reader.sources import open_source
from reader.versions import is_version, source_version
from testing.paths import ARCHIVES

pytestmark = pytest.mark.emulator


async def test_http_versions_come_from_the_etag() -> None:
    from testing.faultserver import FaultServer

    data = (ARCHIVES / "layouts.pt2").read_bytes()
    async with FaultServer() as upstream:
        upstream.put("/a.pt2", data)
        first, again = [await open_source(upstream.url("/a.pt2")) for _ in range(2)]
        upstream.put("/a.pt2", data + b"\0")  # another object: another ETag
        other = await open_source(upstream.url("/a.pt2"))
        versions = [source_version(s) for s in (first, again, other)]
        for source in (first, again, other):
            await source.close()
    assert all(is_version(v) for v in versions)
    assert versions[0] == versions[1] != versions[2]
