"""Versions in URLs, content ETags, Repr-Digest, the manifest, and the grace period (issue 13), checked
in-process (the app through ASGI, archives on local files): no socket, no subprocess. The one check
that needs a server is in test_versions.py."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import urllib.parse

import pytest

import reader
from reader.sources import open_source
from reader.versions import is_version, source_version
from testing import versioned_archives
from testing.checks import sha256_field
from testing.paths import ARCHIVES
from testing.service import in_process, make_app
from testing.torch_oracle import needs_torch
from testing.versioned_archives import CHANGED, deploy

pytestmark = pytest.mark.unit


two_versions = versioned_archives.two_versions  # the fixture: two torch-written versions of one archive


async def version_of(path) -> str:
    source = await open_source(str(path))
    try:
        return source_version(source)
    finally:
        await source.close()


async def test_version_is_stable_across_opens_and_changes_with_the_bytes(tmp_path) -> None:
    path = tmp_path / "a.pt2"
    shutil.copy2(ARCHIVES / "layouts.pt2", path)
    first = await version_of(path)
    assert is_version(first) and first == await version_of(path)
    copy = tmp_path / "copy.pt2"
    shutil.copy2(path, copy)  # another inode, same size and mtime: what a replica's copy looks like
    assert await version_of(copy) == first
    path.write_bytes(path.read_bytes())  # same bytes, new mtime: a new version (cheap identity, no hash)
    assert await version_of(path) != first


async def test_unversioned_routes_revalidate_and_point_at_the_versioned_url() -> None:
    async with in_process(make_app()) as client:
        version = (await client.get("/archives")).json()["archives"][0]["version"]
        for path in ("/tensors/conv.weight/data", "/archives/layouts/tensors/conv.weight/data"):
            response = await client.get(path, params={"order": "contiguous"})
            assert response.status_code == 200
            assert response.headers["cache-control"] == "no-cache"
            pinned = response.headers["content-location"]
            assert pinned == f"/archives/layouts@{version}/tensors/conv.weight/data?order=contiguous"
            again = await client.get(path, params={"order": "contiguous"},
                                     headers={"if-none-match": response.headers["etag"]})  # fmt: skip
            assert again.status_code == 304 and again.headers["cache-control"] == "no-cache"
            fixed = await client.get(pinned)
            assert fixed.status_code == 200 and fixed.content == response.content
            assert fixed.headers["cache-control"] == "public, max-age=31536000, immutable"
            assert "content-location" not in fixed.headers
            assert fixed.headers["etag"] == response.headers["etag"]
        for path in ("/tensors", "/tensors/conv.weight/layout", "/manifest", "/archives/two/manifest"):
            response = await client.get(path)
            assert response.status_code == 200, response.text
            assert response.headers["cache-control"] == "no-cache"
            assert "@" in response.headers["content-location"]
            pinned = await client.get(response.headers["content-location"])
            assert pinned.json() == response.json()
            assert pinned.headers["cache-control"].endswith("immutable")
            assert (
                await client.get(path, headers={"if-none-match": response.headers["etag"]})
            ).status_code == 304


async def test_redirect_switch_sends_to_the_versioned_url() -> None:
    async with in_process(make_app()) as client:
        response = await client.get("/tensors/conv.weight/data", params={"redirect": "1", "order": "default"})
        assert response.status_code == 307
        location = response.headers["location"]
        assert location.startswith("/archives/layouts@") and "redirect" not in location
        assert location.endswith("/tensors/conv.weight/data?order=default")
        assert (await client.get(location)).status_code == 200


async def test_listing_and_layout_carry_the_version_and_the_data_url() -> None:
    async with in_process(make_app()) as client:
        listing = (await client.get("/archives/two/tensors")).json()
        assert is_version(listing["version"]) and set(listing["models"]) == {"encoder", "decoder"}
        for layout in listing["tensors"]:
            assert layout["archive_version"] == listing["version"]
            response = await client.get(layout["data_url"])
            assert response.status_code == 200
            assert response.headers["x-tensor-dtype"] == layout["dtype"]
            assert layout["data_url"].endswith(f"?model={layout['model']}")


@pytest.mark.parametrize(
    "archive_id, params",
    [
        ("layouts", {"order": "default"}),
        ("layouts", {"order": "contiguous"}),
        ("layouts", {"format": "npy"}),
        ("two", {"model": "encoder"}),
        ("two", {"model": "decoder"}),
        ("dtypes", {}),
        ("deflate", {}),
    ],
)
async def test_repr_digest_is_the_sha256_of_the_body(archive_id: str, params: dict) -> None:
    async with in_process(make_app()) as client:
        listing = (await client.get(f"/archives/{archive_id}/tensors", params={"model": params.get("model")}
                                    if "model" in params else None)).json()  # fmt: skip
        checked = 0
        for layout in listing["tensors"]:
            if layout["unsupported"]:
                continue
            url = f"/archives/{archive_id}/tensors/{urllib.parse.quote(layout['name'], safe='')}/data"
            response = await client.get(url, params={**params, "model": layout["model"]})
            assert response.status_code == 200, response.text
            assert response.headers["repr-digest"] == sha256_field(response.content)
            ranged = await client.get(url, params={**params, "model": layout["model"]},
                                      headers={"range": "bytes=0-0"})  # fmt: skip
            # the representation's digest, whatever part of it a response carries
            assert ranged.headers["repr-digest"] == response.headers["repr-digest"]
            checked += 1
        assert checked


async def test_manifest_lists_every_digest_in_a_stable_order() -> None:
    async with in_process(make_app()) as client:
        manifest = (await client.get("/archives/two/manifest")).json()
        assert manifest["archive"] == "two" and manifest["format"] == "pt2serve-manifest/1"
        keys = [(t["model"], t["name"]) for t in manifest["tensors"]]
        assert keys == sorted(keys) and {m for m, _ in keys} == {"encoder", "decoder"}
        for entry in manifest["tensors"]:
            body = (await client.get(entry["url"])).content
            assert hashlib.sha256(body).hexdigest() == entry["sha256"]
            assert len(body) == entry["nbytes"] == entry["layout"]["nbytes"]
        again = await client.get(f"/archives/two@{manifest['version']}/manifest")
        assert again.json() == manifest
        selected = await client.get("/archives/two/manifest", params={"model": "encoder", "prefix": "proj."})
        names = [(t["model"], t["name"]) for t in selected.json()["tensors"]]
        assert names and names == [("encoder", "proj.bias"), ("encoder", "proj.weight")]
        pickled = (await client.get("/archives/pickled/manifest")).json()
        refused = [t for t in pickled["tensors"] if t["layout"]["unsupported"]]
        assert refused and all(t["sha256"] is None and t["url"] is None for t in refused)


async def test_unknown_version_is_a_json_404_naming_the_current_one() -> None:
    async with in_process(make_app()) as client:
        current = (await client.get("/archives")).json()["archives"][0]["version"]
        unknown = "/archives/layouts@0123456789abcdef"
        for path in (
            f"{unknown}/tensors/conv.weight/data",
            f"{unknown}/tensors",
            "/archives/layouts@x/manifest",
        ):
            response = await client.get(path)
            assert response.status_code == 404
            error = response.json()["error"]
            assert error["code"] == "version_not_found" and error["current_version"] == current
            assert error["current_url"].startswith(f"/archives/layouts@{current}/")
            assert response.headers["cache-control"] == "no-cache"


@needs_torch
async def test_an_update_keeps_unchanged_etags_and_serves_the_old_version_for_the_grace_period(
    two_versions, tmp_path
) -> None:
    first, second = two_versions
    path = tmp_path / "net.pt2"
    deploy(first, path)
    app = make_app([f"net={path}"], version_grace_seconds=3600)
    async with in_process(app) as client:
        old = (await client.get("/archives/net/manifest")).json()
        tags = {}
        for entry in old["tensors"]:
            response = await client.get(f"/archives/net/tensors/{entry['name']}/data")
            tags[entry["name"]] = response.headers["etag"]
        deploy(second, path)
        await app.state.registry.reopen("net", stale=app.state.registry.slot("net").archive)
        new = (await client.get("/archives/net/manifest")).json()
        assert new["version"] != old["version"]
        before = {t["name"]: t["sha256"] for t in old["tensors"]}
        after = {t["name"]: t["sha256"] for t in new["tensors"]}
        assert {name for name in after if after[name] != before[name]} == set(CHANGED)
        for name, tag in tags.items():
            response = await client.get(f"/archives/net/tensors/{name}/data", headers={"if-none-match": tag})
            assert response.status_code == (200 if name in CHANGED else 304), name
            assert response.headers["content-location"].startswith(f"/archives/net@{new['version']}/")
        # the old version is still served, from the bytes it was opened on
        for entry in old["tensors"]:
            body = (await client.get(entry["url"])).content
            assert hashlib.sha256(body).hexdigest() == entry["sha256"]
        archives = (await client.get("/archives")).json()["archives"][0]
        assert archives["version"] == new["version"] and archives["retiring"] == [old["version"]]


@needs_torch
async def test_after_the_grace_period_the_old_version_is_gone(two_versions, tmp_path) -> None:
    first, second = two_versions
    path = tmp_path / "net.pt2"
    deploy(first, path)
    app = make_app([f"net={path}"], version_grace_seconds=0.2)
    async with in_process(app) as client:
        old = (await client.get("/archives/net/manifest")).json()
        deploy(second, path)
        await app.state.registry.reopen("net", stale=app.state.registry.slot("net").archive)
        assert (await client.get(old["tensors"][0]["url"])).status_code == 200  # within the grace period
        await asyncio.sleep(0.3)
        response = await client.get(old["tensors"][0]["url"])
        assert response.status_code == 410
        error = response.json()["error"]
        new_version = (await client.get("/archives")).json()["archives"][0]["version"]
        assert error["code"] == "version_gone" and error["current_version"] == new_version
        assert (await client.get(error["current_url"])).status_code == 200


@needs_torch
async def test_a_version_this_replica_has_not_seen_yet_is_looked_up_at_the_source(
    two_versions, tmp_path
) -> None:
    """Another replica may already serve the new version: a URL naming it makes this one
    revalidate its archive (as it would at the next interval) instead of answering 404."""
    first, second = two_versions
    path = tmp_path / "net.pt2"
    deploy(first, path)
    async with in_process(make_app([f"net={path}"])) as client:
        old = (await client.get("/archives/net/manifest")).json()
        deploy(second, path)
        newer = await version_of(path)
        response = await client.get(f"/archives/net@{newer}/tensors/{CHANGED[0]}/data")
        assert response.status_code == 200
        assert response.headers["cache-control"].endswith("immutable")
        async with reader.open_archive(path) as ar:
            assert response.content == await ar.read(CHANGED[0])
        assert (await client.get("/archives")).json()["archives"][0]["version"] == newer
        assert newer != old["version"]


def test_versioned_twin_urls_are_percent_encoded() -> None:
    """Content-Location and redirects name the request's own path, which may hold any character
    once decoded: they go out percent-encoded (a header value never carries CR, LF or non-Latin-1)."""
    from starlette.requests import Request

    from app.versioning import pinned_url

    path = "/archives/demo/tensors/wëight x\r\nSet-Cookie: a=1/data"
    scope = {"type": "http", "path": path, "query_string": b"", "headers": []}
    url = pinned_url(Request(scope), "demo", "v1")
    assert url == "/archives/demo@v1/tensors/w%C3%ABight%20x%0D%0ASet-Cookie:%20a=1/data"
    assert urllib.parse.unquote(url) == path.replace("/demo/", "/demo@v1/")
    scope["path"] = "/tensors/plain.weight/layout"
    assert pinned_url(Request(scope), "de mo", "v2") == "/archives/de%20mo@v2/tensors/plain.weight/layout"
