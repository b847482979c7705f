"""Behind PT2SERVE_API_TOKEN: the viewer's page shell is open, data is not; short-lived signed URLs
(GET /sign) let a download, curl or a device fetch one path and query without the token."""

from __future__ import annotations

import time

import pytest

from app.signing import SignatureRefused, UrlSigner, derive_key
from testing.paths import ARCHIVES
from testing.service import assert_json_error, in_process, make_app

pytestmark = pytest.mark.unit

LAYOUTS = f"layouts={ARCHIVES / 'layouts.pt2'}"
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def test_page_shell_is_open_and_data_is_not() -> None:
    async with in_process(make_app([LAYOUTS], api_token=TOKEN)) as client:
        for path in (
            "/",
            "/viewer/app.js",
            "/viewer/viewer.css",
            "/viewer/vendor/dagre.esm.js",
            "/favicon.ico",
        ):
            assert (await client.get(path)).status_code == 200, path
        for path in ("/archives", "/tensors", "/archives/layouts/graph", "/viewer/../archives",
                     "/viewer/%2e%2e/archives", "/sign?path=/tensors"):  # fmt: skip
            assert_json_error(await client.get(path), 401)
        page = (await client.get("/")).text
        assert "layouts" not in page and TOKEN not in page


async def test_signed_url_fetches_without_the_token() -> None:
    async with in_process(make_app([LAYOUTS], api_token=TOKEN)) as client:
        path = "/archives/layouts/tensors/conv.weight/data?format=npy"
        signed = (await client.get("/sign", params={"path": path}, headers=AUTH)).json()
        assert signed["url"].startswith(path + "&exp=") and "&sig=" in signed["url"]
        assert TOKEN not in signed["url"]
        assert signed["expires"] > time.time()
        direct = await client.get(path, headers=AUTH)
        via_sig = await client.get(signed["url"])
        assert via_sig.status_code == 200 and via_sig.content == direct.content
        assert (await client.head(signed["url"])).status_code == 200
        # a path with encoded characters signs and verifies by its decoded form
        named = (await client.get("/sign", params={"path": "/archives/layouts/tensors/conv%2Eweight/layout"},
                                  headers=AUTH)).json()["url"]  # fmt: skip
        assert (await client.get(named)).status_code == 200


async def test_wrong_or_expired_signatures_are_json_403() -> None:
    async with in_process(make_app([LAYOUTS], api_token=TOKEN)) as client:
        path = "/archives/layouts/tensors/conv.weight/data"
        url = (await client.get("/sign", params={"path": path, "ttl": 60}, headers=AUTH)).json()["url"]
        base, sig = url.rsplit("&sig=", 1)
        flipped = f"{base}&sig={sig[:-1]}{'0' if sig[-1] != '0' else '1'}"
        other_path = url.replace("conv.weight", "conv.bias")
        longer = url.replace("exp=", "exp=9")
        extra = url + "&format=npy"
        reordered = path + "?" + "&".join(reversed(url.split("?", 1)[1].split("&")))
        for bad in (flipped, other_path, longer, extra, reordered, path + "?sig=abc", path + "?exp=1&sig="):
            response = await client.get(bad)
            assert response.status_code == 403, bad
            assert assert_json_error(response, 403)["code"] == "bad_signature", bad
        # a signed URL is for GET and HEAD only
        assert_json_error(await client.post(url), 403)
        # expired: signed in the past with the server's key
        signer = UrlSigner(derive_key(TOKEN))
        old, _ = signer.sign(path, 60, now=time.time() - 3600)
        error = assert_json_error(await client.get(old), 403)
        assert error["code"] == "signature_expired"


async def test_sign_needs_the_token_and_a_local_path() -> None:
    async with in_process(make_app([LAYOUTS], api_token=TOKEN)) as client:
        for url in ("https://evil.example/x", "//evil.example/x", "relative", "/x?exp=1", "/x?sig=1"):
            assert_json_error(await client.get("/sign", params={"path": url}, headers=AUTH), 422)
    async with in_process(make_app([LAYOUTS])) as client:
        assert_json_error(await client.get("/sign", params={"path": "/tensors"}), 404)


def test_signer_rules() -> None:
    signer = UrlSigner(b"k" * 32, max_ttl=100)
    url, expires = signer.sign("/a/b?x=1", 10_000, now=1000)
    assert expires == 1100  # capped by max_ttl
    signer.verify("/a/b", url.split("?", 1)[1], now=1050)
    with pytest.raises(SignatureRefused):
        signer.verify("/a/b", url.split("?", 1)[1], now=1101)
    with pytest.raises(SignatureRefused):
        UrlSigner(b"other" * 8).verify("/a/b", url.split("?", 1)[1], now=1050)
