"""Opening a location a client names is safe by construction (POST /archives/open, --allow-open), checked
against the service in process with no socket: nothing opens without --allow-open; a location outside
the patterns is refused with its rule; credentials in a URL and form posts are refused; paths stay
inside the folder a pattern names; the token rule and the per-client rate apply; opened archives are
evicted least recently used first and served like configured ones. The address rule's checks against
loopback listeners and the audit hook are in test_open_safety.py."""

from __future__ import annotations

import json
import os

import pytest

from app.addresses import refusal
from testing.open_requests import (
    assert_refused,
    open_location,
    opener,
    small_archive,
)
from testing.paths import ARCHIVES
from testing.service import in_process, make_app

pytestmark = pytest.mark.unit


@pytest.fixture
def fixture_archive():
    return ARCHIVES / "layouts.pt2"


async def test_nothing_opens_without_allow_open(fixture_archive):
    async with in_process(make_app()) as client:
        response = await open_location(client, str(fixture_archive))
        assert response.status_code == 404 and response.json()["error"]["code"] == "opening_disabled"
        listing = (await client.get("/archives")).json()
        assert listing["allow_open"] == [] and not any(a.get("opened") for a in listing["archives"])


async def test_a_location_no_pattern_matches_is_refused_with_the_rule():
    async with in_process(opener(allow_open=("hf://team/*", "s3://models/*"))) as client:
        message = assert_refused(await open_location(client, "s3://other/x.pt2"), "matches no --allow-open")
        assert "hf://team/*" in message and "s3://models/*" in message
        assert_refused(await open_location(client, "ftp://models/x.pt2"), "scheme 'ftp'")
        assert_refused(await open_location(client, "/etc/passwd"), "no --allow-open pattern is a folder")


async def test_credentials_in_a_url_are_refused():
    async with in_process(opener(allow_open=("https://*",))) as client:
        assert_refused(await open_location(client, "https://user:secret@example.com/m.pt2"), "credentials")


def test_the_address_rule():
    internal = ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "fd00:ec2::254",
                "::1", "fe80::1", "224.0.0.1", "0.0.0.0", "::", "::ffff:10.0.0.1"]  # fmt: skip
    for address in internal:
        assert refusal(address) is not None, address
    for address in ["93.184.216.34", "2606:4700::1111", "8.8.8.8"]:
        assert refusal(address) is None, address
    assert refusal("169.254.169.254") == "cloud metadata" and refusal("fd00:ec2::254") == "cloud metadata"


@pytest.fixture
def folders(tmp_path):
    models, secret = tmp_path / "models", tmp_path / "secret"
    models.mkdir()
    secret.mkdir()
    small_archive(models / "ok.pt2")
    small_archive(secret / "s.pt2")
    os.symlink(secret / "s.pt2", models / "out.pt2")  # a link out of the folder
    os.symlink(secret, models / "sub")  # a folder link out of it
    os.symlink(models / "ok.pt2", models / "alias.pt2")  # a link that stays inside
    return models, secret


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("{models}/../secret/s.pt2", "'..'"),
        ("{models}/sub/../ok.pt2", "'..'"),
        ("{models}/out.pt2", "outside every folder"),
        ("{models}/sub/s.pt2", "outside every folder"),
        ("{secret}/s.pt2", "outside every folder"),
        ("models/ok.pt2", "absolute"),
    ],
)
async def test_paths_stay_inside_the_folder_a_pattern_names(folders, path, reason):
    models, secret = folders
    async with in_process(make_app(allow_open=(f"{models}/*",))) as client:
        assert_refused(await open_location(client, path.format(models=models, secret=secret)), reason)


async def test_paths_inside_the_folder_open(folders):
    models, _ = folders
    async with in_process(make_app(allow_open=(f"{models}/*.pt2",))) as client:
        for name in ("ok.pt2", "alias.pt2"):
            response = await open_location(client, str(models / name))
            assert response.status_code == 200, response.text
            assert response.json()["location"] == str(models / "ok.pt2")  # the real path
        (models / "notes.txt").write_text("not an archive")
        assert_refused(
            await open_location(client, str(models / "notes.txt")), "matches no --allow-open pattern"
        )


async def test_the_token_rule_applies_to_opening(fixture_archive):
    app = make_app(allow_open=(f"{fixture_archive.parent}/*",), api_token="t0k")
    async with in_process(app) as client:
        refused = await open_location(client, str(fixture_archive))
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
        allowed = await open_location(client, str(fixture_archive), Authorization="Bearer t0k")
        assert allowed.status_code == 200
        unsent = await client.get(f"/archives/{allowed.json()['id']}/tensors")
        assert unsent.status_code == 401


async def test_a_form_post_cannot_open(fixture_archive):
    async with in_process(make_app(allow_open=(f"{fixture_archive.parent}/*",))) as client:
        body = json.dumps({"location": str(fixture_archive)})
        response = await client.post("/archives/open", content=body, headers={"content-type": "text/plain"})
        assert response.status_code == 422


async def test_opening_is_rate_limited_per_client(folders):
    models, _ = folders
    app = make_app(allow_open=(f"{models}/*",), open_burst=2, open_rate=0.01)
    async with in_process(app) as client:
        for _ in range(2):
            assert (await open_location(client, str(models / "ok.pt2"))).status_code == 200
        limited = await open_location(client, str(models / "ok.pt2"))
        assert limited.status_code == 429 and limited.json()["error"]["code"] == "too_many_opens"
        assert int(limited.headers["retry-after"]) >= 1
        refused = await open_location(client, "/etc/passwd")  # refused ones count too
        assert refused.status_code == 429


async def test_opened_archives_are_evicted_least_recently_used_first(tmp_path):
    for name in "abc":
        small_archive(tmp_path / f"{name}.pt2")
    app = make_app(allow_open=(f"{tmp_path}/*",), open_max=2)
    async with in_process(app) as client:
        ids = {}
        for name in "ab":
            ids[name] = (await open_location(client, str(tmp_path / f"{name}.pt2"))).json()["id"]
        assert (await client.get(f"/archives/{ids['a']}/tensors")).status_code == 200  # a: used last
        ids["c"] = (await open_location(client, str(tmp_path / "c.pt2"))).json()["id"]
        status = {n: (await client.get(f"/archives/{i}/tensors")).status_code for n, i in ids.items()}
        assert status == {"a": 200, "b": 404, "c": 200}
        assert (await client.get("/archives/layouts/tensors")).status_code == 200  # configured: kept
        again = await open_location(client, str(tmp_path / "b.pt2"))
        assert again.json()["id"] == ids["b"]  # the same id again


async def test_an_opened_archive_has_the_routes_etags_and_versioned_urls_of_a_configured_one(fixture_archive):
    async with in_process(make_app(allow_open=(f"{fixture_archive.parent}/*",))) as client:
        opened = (await open_location(client, str(fixture_archive))).json()
        archive_id, version = opened["id"], opened["version"]
        listing = (await client.get(f"/archives/{archive_id}/tensors")).json()
        name = listing["tensors"][0]["name"]
        assert listing["version"] == version
        data = await client.get(f"/archives/{archive_id}@{version}/tensors/{name}/data")
        assert data.status_code == 200 and data.headers["etag"]
        assert "immutable" in data.headers["cache-control"]
        again = await client.get(
            f"/archives/{archive_id}@{version}/tensors/{name}/data",
            headers={"If-None-Match": data.headers["etag"]},
        )
        assert again.status_code == 304
        moved = await client.get(f"/archives/{archive_id}/tensors/{name}/data?redirect=1")
        assert moved.status_code == 307 and f"{archive_id}@{version}" in moved.headers["location"]


async def test_the_open_route_is_in_the_openapi_document():
    async with in_process(make_app(allow_open=("hf://x/*",))) as client:
        document = (await client.get("/openapi.json")).json()
        responses = document["paths"]["/archives/open"]["post"]["responses"]
        assert {"200", "403", "404", "422", "429", "503"} <= set(responses)
        assert "open_refused" in responses["403"]["x-error-codes"]
        assert responses["429"]["headers"]["Retry-After"]["required"] is True
