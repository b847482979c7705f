"""Headers, hosts and tokens (issue 53 item 8), in process: `nosniff` on every answer and a
Content-Security-Policy on the page shell; a token-less service answers on loopback only for loopback
`Host` names and `--allowed-host` ones (DNS rebinding); two Authorization fields are refused; `/sign`
signs no route that grants access; `/healthz` names archives to token holders only; behind a
trusted proxy the open rate limit keys on the client the proxy names."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from app.hosts import HostRule, host_name
from app.open_limits import TrustedProxies
from app.signing import UrlSigner, derive_key
from testing.paths import ARCHIVES
from testing.service import assert_json_error, make_app

pytestmark = pytest.mark.unit

LAYOUTS = f"layouts={ARCHIVES / 'layouts.pt2'}"
TOKEN = "guard-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@contextlib.asynccontextmanager
async def client_of(app, base_url: str = "http://127.0.0.1:8000", peer: str = "127.0.0.1") -> AsyncIterator:
    """An in-process client whose requests arrive at `base_url`'s address (the ASGI scope's
    `server`) from `peer`, as on a service bound there."""
    await app.state.registry.start()
    try:
        transport = httpx.ASGITransport(app=app, client=(peer, 40000))
        async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
            yield client
    finally:
        await app.state.registry.close()


# --------------------------------------------------------------------------- response headers


async def test_every_answer_says_nosniff_and_the_page_shell_has_a_csp() -> None:
    async with client_of(make_app([LAYOUTS])) as client:
        for path in ("/archives", "/tensors/conv.weight/layout", "/tensors/conv.weight/data", "/healthz",
                     "/tensors/nope/data", "/no/such/route", "/viewer/app.js", "/", "/metrics"):  # fmt: skip
            response = await client.get(path)
            assert response.headers.get("x-content-type-options") == "nosniff", path
        ranged = await client.get("/tensors/conv.weight/data", headers={"Range": "bytes=0-15"})
        assert ranged.status_code == 206 and ranged.headers["x-content-type-options"] == "nosniff"
        pinned = (await client.get("/tensors/conv.weight/data")).headers["content-location"]
        for headers in ({}, {"Range": "bytes=0-15"}, {"Range": "bytes=99999-"}):
            answer = await client.get(pinned, headers=headers)
            assert answer.headers.get("x-content-type-options") == "nosniff", (answer.status_code, headers)
        etag = ranged.headers["etag"]
        unchanged = await client.get("/tensors/conv.weight/data", headers={"If-None-Match": etag})
        assert unchanged.status_code == 304 and unchanged.headers["x-content-type-options"] == "nosniff"
    app = make_app([LAYOUTS], api_token=TOKEN, cors_origins=("https://ok.example",))
    async with client_of(app) as client:
        refused = await client.get("/tensors/conv.weight/data")
        assert refused.status_code == 401 and refused.headers["x-content-type-options"] == "nosniff"
        preflight = await client.options(
            "/tensors/conv.weight/data",
            headers={"Origin": "https://ok.example", "Access-Control-Request-Method": "GET"},
        )
        assert preflight.status_code == 200 and preflight.headers["x-content-type-options"] == "nosniff"
    async with client_of(make_app([LAYOUTS])) as client:
        page = await client.get("/")
        csp = {d.split()[0]: d.split()[1:] for d in page.headers["content-security-policy"].split("; ")}
        assert csp["frame-ancestors"] == ["'none'"] and csp["default-src"] == ["'self'"]
        assert csp["script-src"] == ["'self'"] and csp["object-src"] == ["'none'"]
        assert page.headers["referrer-policy"] == "no-referrer"
        assert "content-security-policy" not in (await client.get("/viewer/app.js")).headers


# --------------------------------------------------------------------------- hosts


async def test_a_token_less_loopback_service_answers_loopback_names_only() -> None:
    async with client_of(make_app([LAYOUTS])) as client:
        for host in ("127.0.0.1:8000", "localhost", "LOCALHOST:8000", "localhost.", "[::1]:8000",
                     "viewer.localhost:8000", "127.0.0.2"):  # fmt: skip
            response = await client.get("/tensors/conv.weight/layout", headers={"Host": host})
            assert response.status_code == 200, host
        for host in ("attacker.example", "attacker.example:8000", "localhost.attacker.example",
                     "127.0.0.1.attacker.example", "10.0.0.1", "[::2]"):  # fmt: skip
            for path in ("/tensors/conv.weight/data", "/archives", "/", "/healthz"):
                response = await client.get(path, headers={"Host": host})
                assert assert_json_error(response, 421)["code"] == "host_refused", (host, path)
                assert response.headers["x-content-type-options"] == "nosniff"


async def test_allowed_hosts_extend_the_loopback_names() -> None:
    app = make_app([LAYOUTS], allowed_hosts=("models.example", "*.team.example"))
    async with client_of(app) as client:
        for host, status in (("models.example", 200), ("a.team.example:80", 200), ("team.example", 421),
                             ("localhost", 200), ("other.example", 421)):  # fmt: skip
            assert (await client.get("/archives", headers={"Host": host})).status_code == status, host
    async with client_of(make_app([LAYOUTS], allowed_hosts=("*",))) as client:
        assert (await client.get("/archives", headers={"Host": "any.example"})).status_code == 200


async def test_hosts_are_not_checked_with_a_token_or_off_loopback() -> None:
    async with client_of(make_app([LAYOUTS], api_token=TOKEN)) as client:
        assert (await client.get("/archives", headers={"Host": "models.example", **AUTH})).status_code == 200
    async with client_of(make_app([LAYOUTS]), base_url="http://10.1.2.3:8000") as client:
        assert (await client.get("/archives", headers={"Host": "models.example"})).status_code == 200


def test_host_names() -> None:
    assert host_name(b"[::1]:8000") == "::1" and host_name(b"Example.COM.:80") == "example.com"
    rule = HostRule(["*.team.example"])
    scope = {"server": ("::ffff:127.0.0.1", 80)}
    assert rule.admits(scope, b"x.team.example") and rule.admits(scope, b"x.localhost")
    assert not rule.admits(scope, b"team.example") and rule.admits(scope, None)


# --------------------------------------------------------------------------- tokens


async def test_two_authorization_fields_are_refused_everywhere() -> None:
    for token in (TOKEN, None):
        async with client_of(make_app([LAYOUTS], api_token=token)) as client:
            for pair in ((AUTH["Authorization"], "Bearer nope"), ("Bearer nope", AUTH["Authorization"]),
                         (AUTH["Authorization"], AUTH["Authorization"])):  # fmt: skip
                headers = [("Authorization", value) for value in pair]
                for path in ("/tensors/conv.weight/data", "/archives", "/auth", "/healthz", "/"):
                    response = await client.get(path, headers=headers)
                    assert assert_json_error(response, 400)["code"] == "ambiguous_request", (path, token)
                    assert response.headers["cache-control"] == "no-store"
            two_hosts = [("Host", "127.0.0.1"), ("Host", "attacker.example")]
            assert (await client.get("/archives", headers=two_hosts)).status_code == 400


async def test_sign_never_signs_a_route_that_grants_access() -> None:
    async with client_of(make_app([LAYOUTS], api_token=TOKEN)) as client:
        for path in ("/sign?path=/archives", "/sign", "/auth", "//sign", "/sign/", "/%73ign?path=/x",
                     "/archives/../sign", "/archives/%2e%2e/sign", "/./auth"):  # fmt: skip
            response = await client.get("/sign", params={"path": path}, headers=AUTH)
            assert assert_json_error(response, 422)["code"] == "bad_url", path
        # a URL for /sign signed by the same key (as one minted before this rule) opens nothing
        signer = UrlSigner(derive_key(TOKEN))
        minted, _ = signer.sign("/archives", 60)  # a URL for an ordinary route opens it
        assert (await client.get(minted)).status_code == 200
        forged = signer._mac("/sign", "path=%2Farchives&exp=9999999999")
        url = f"/sign?path=%2Farchives&exp=9999999999&sig={forged}"
        assert assert_json_error(await client.get(url), 403)["code"] == "bad_signature"
        auth = await client.get("/auth", headers={"X-Original-URI": url})
        assert auth.status_code == 403


async def test_healthz_names_archives_to_token_holders_only() -> None:
    async with client_of(make_app([LAYOUTS], api_token=TOKEN)) as client:
        anonymous = await client.get("/healthz")
        assert anonymous.status_code == 200 and anonymous.json() == {"status": "ok"}
        wrong = await client.get("/healthz", headers={"Authorization": "Bearer nope"})
        assert wrong.json() == {"status": "ok"}
        named = await client.get("/healthz", headers=AUTH)
        assert named.json() == {"status": "ok", "archives": {"layouts": "open"}}
    async with client_of(make_app([LAYOUTS])) as client:  # no token: nothing is private
        assert (await client.get("/healthz")).json()["archives"] == {"layouts": "open"}


# --------------------------------------------------------------------------- behind a proxy


def test_the_client_behind_trusted_proxies() -> None:
    proxies = TrustedProxies(["10.0.0.5", "192.168.0.0/16"])

    def client(peer: str, *forwarded: str) -> str:
        headers = [(b"x-forwarded-for", value.encode()) for value in forwarded]
        return proxies.client({"client": (peer, 1), "headers": headers})

    assert client("203.0.113.9", "1.2.3.4") == "203.0.113.9"  # not a proxy: its word is not taken
    assert client("10.0.0.5", "1.2.3.4") == "1.2.3.4"
    assert client("10.0.0.5", "6.6.6.6, 1.2.3.4") == "1.2.3.4"  # what the client wrote is left of it
    assert client("10.0.0.5", "6.6.6.6, 1.2.3.4, 192.168.1.1") == "1.2.3.4"  # two proxies
    assert client("10.0.0.5", "6.6.6.6", "1.2.3.4") == "1.2.3.4"  # two fields: one list
    assert client("10.0.0.5", "192.168.1.1") == "192.168.1.1"  # every hop a proxy: the leftmost
    assert client("10.0.0.5") == "10.0.0.5"
    assert client("::ffff:10.0.0.5", "::ffff:1.2.3.4") == "1.2.3.4"
    # an IPv6 client is its /64: one host holds the whole network (a bucket per address: 2^64 buckets)
    assert (
        client("10.0.0.5", "2001:db8:1:2::1")
        == client("10.0.0.5", "2001:db8:1:2:ffff::9")
        == "2001:db8:1:2::/64"
    )
    assert client("2001:db8:1:2::1") == client("2001:db8:1:2:abcd::1") != client("2001:db8:1:3::1")
    untrusting = TrustedProxies()  # no proxy named: nobody's word is taken
    assert untrusting.client({"client": ("10.0.0.5", 1), "headers": [(b"x-forwarded-for", b"1.2.3.4")]}) == (
        "10.0.0.5"
    )


async def test_the_open_rate_limit_keys_on_the_client_behind_a_proxy() -> None:
    app = make_app([LAYOUTS], allow_open=(str(ARCHIVES / "*.pt2"),), open_burst=1, open_rate=0.001,
                   trusted_proxies=("127.0.0.1",))  # fmt: skip
    body = {"location": str(ARCHIVES / "dtypes.pt2")}
    async with client_of(app) as client:
        first = await client.post("/archives/open", json=body, headers={"X-Forwarded-For": "1.2.3.4"})
        assert first.status_code == 200, first.text
        again = await client.post("/archives/open", json=body, headers={"X-Forwarded-For": "1.2.3.4"})
        assert assert_json_error(again, 429)["code"] == "too_many_opens"
        other = await client.post("/archives/open", json=body, headers={"X-Forwarded-For": "5.6.7.8"})
        assert other.status_code == 200, other.text
