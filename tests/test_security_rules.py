"""Hostile input against the service in process (httpx's ASGI transport, no socket): no client-chosen
upstream, odd names, Range abuse, CORS, auth, and secrets that must never leave the process. Where the
bytes on the wire matter (a real uvicorn, raw asyncio streams), the checks are in test_security.py."""

from __future__ import annotations

import logging
import re

import pytest

from testing.paths import ARCHIVES
from testing.secret_sweeps import (
    SIGNATURE,
    USERINFO_PASSWORD,
    assert_no_secret,
    sweep,
)
from testing.service import LAYOUTS, assert_json_error, in_process, make_app

pytestmark = pytest.mark.unit


def test_no_route_takes_a_url_or_location() -> None:
    """Nothing a client sends names a location: route parameters are ids, names and formats only."""
    app = make_app([LAYOUTS])
    schema = app.openapi()
    names = set()
    for path, methods in schema["paths"].items():
        names |= set(re.findall(r"{(\w+)", path))
        for operation in methods.values():
            names |= {p["name"] for p in operation.get("parameters", [])}
    # /sign's `path` is a path on this service (anything with a scheme or host is refused: 422)
    allowed = {"archive_id", "name", "model", "prefix", "kind", "order", "format", "alignment", "path", "ttl"}
    allowed |= {"redirect", "slice"}  # a flag; NumPy indexing of the named tensor
    allowed |= {"other_id", "exact"}  # /archives/{archive_id}/compare/{other_id}: an archive id; a flag
    assert names <= allowed, names
    for route in app.routes:
        assert not {"POST", "PUT", "PATCH", "DELETE"} & set(getattr(route, "methods", set()) or ())


async def test_hostile_tensor_names_are_plain_404s() -> None:
    names = [
        "..", "../..", "..%2F..%2Fetc%2Fpasswd", "%2E%2E%2F%2E%2E", "scalar%00", "%00", "a%00b",
        "%2F", "%2F%2F%2F", "ünïcödé.wëight", "%F0%9F%94%A5", "%FF%FE", "%C0%AE%C0%AE", "x" * 2000,
        "a%0D%0ASet-Cookie:%20x=1", "<script>alert(1)</script>", "'; DROP TABLE t;--",
    ]  # fmt: skip
    async with in_process(make_app([LAYOUTS])) as client:
        for name in names:
            for suffix in ("layout", "data"):
                response = await client.get(f"/tensors/{name}/{suffix}")
                error = assert_json_error(response, 404)
                # httpx removes dot segments itself ("/tensors/../layout" → "/layout"): not_found then
                assert error["code"] in ("tensor_not_found", "not_found"), (name, error)
                assert "set-cookie" not in response.headers
            head = await client.head(f"/tensors/{name}/data")
            assert head.status_code == 404 and head.content == b""


async def test_range_abuse_is_bounded_and_never_crashes() -> None:
    async with in_process(make_app([LAYOUTS])) as client:
        full = await client.get("/tensors/transposed/data")
        size = len(full.content)
        assert size > 8

        many = ",".join(f"{i}-{i}" for i in range(10_000))
        response = await client.get("/tensors/transposed/data", headers={"Range": f"bytes={many}"})
        assert response.status_code == 200 and response.content == full.content  # too many: ignored

        overlapping = ",".join(["0-"] * 10_000)
        response = await client.get("/tensors/transposed/data", headers={"Range": f"bytes={overlapping}"})
        assert response.status_code == 200 and len(response.content) == size

        # byte positions have at most 19 digits; longer ones make the header ignored (200)
        cases = {
            "bytes=-99999999999999999999": (200, full.content),
            "bytes=-9999999999999999999": (206, full.content),
            "bytes=9223372036854775807-": (416, None),
            "bytes=18446744073709551615-": (200, full.content),
            "bytes=0-9999999999999999999": (206, full.content),
            "bytes=-0": (416, None),
            "bytes=5-2": (200, full.content),
            "bytes=--1": (200, full.content),
            "bytes=-1-2": (200, full.content),
            "bytes=1-2-3": (200, full.content),
            "bytes=0x10-": (200, full.content),
            "bytes=+1-2": (200, full.content),
            "bytes=1e3-": (200, full.content),
            "bytes=": (200, full.content),
            "bytes=,": (200, full.content),
            "bytes": (200, full.content),
            "items=0-1": (200, full.content),
            "=0-1": (200, full.content),
            "bytes=0-0,": (200, full.content),
            "bytes=\t0-1": (206, full.content[:2]),
        }
        for header, (status, content) in cases.items():
            response = await client.get("/tensors/transposed/data", headers={"Range": header})
            assert response.status_code == status, (header, response.status_code, response.text[:200])
            if status == 416:
                assert response.headers["content-range"] == f"bytes */{size}"
                assert_json_error(response)
            elif content is not None:
                assert response.content == content, header


async def test_malformed_range_is_ignored_not_an_error() -> None:
    """Invalid ranges are ignored (200, the whole body) like `bytes=x-`; these are valid-looking to
    str.isdigit() but not to int(): superscript digits (latin-1 bytes) and numbers past Python's
    4300-digit int limit. They must not surface as 400 with a Python error text."""
    async with in_process(make_app([LAYOUTS])) as client:
        full = (await client.get("/tensors/transposed/data")).content
        huge = "9" * 5000
        for header in (b"bytes=\xb2-", b"bytes=0-\xb9", b"bytes=-\xb3", f"bytes={huge}-".encode(),
                       f"bytes=-{huge}".encode(), f"bytes=0-{huge}".encode()):  # fmt: skip
            response = await client.get("/tensors/transposed/data", headers={"Range": header})
            assert "int()" not in response.text and "Exceeds the limit" not in response.text, header[:40]
            assert response.status_code in (200, 206, 416), (header[:40], response.status_code, response.text)
            if response.status_code == 200:
                assert response.content == full


async def test_many_overlapping_ranges_do_not_amplify_unboundedly() -> None:
    """At most 16 ranges are served, and overlapping ones are joined: 16 whole-body ranges are the
    body once (tests/test_range_amplification.py checks every route under uvicorn)."""
    async with in_process(make_app([LAYOUTS])) as client:
        size = len((await client.get("/tensors/transposed/data")).content)
        sixteen, seventeen = "bytes=" + ",".join(["0-"] * 16), "bytes=" + ",".join(["0-"] * 17)
        response = await client.get("/tensors/transposed/data", headers={"Range": sixteen})
        assert response.status_code == 206 and len(response.content) == size
        response = await client.get("/tensors/transposed/data", headers={"Range": seventeen})
        assert response.status_code == 200 and len(response.content) == size


async def test_bearer_token_variations() -> None:
    token = "t0ken-Value_42"
    async with in_process(make_app([LAYOUTS], api_token=token)) as client:
        refused = [
            None, "", "Bearer", "Bearer ", "Bearer  " + token, f"Bearer {token} ", f" Bearer {token}",
            f"Bearer {token}x", f"Bearer {token[:-1]}", f"Basic {token}", token, f"Token {token}",
            f"Bearer {token.upper()}", f"Bearer\t{token}", f"Bearer {token}\x00", "Bearer " + "x" * 8000,
        ]  # fmt: skip
        for value in refused:
            headers = {} if value is None else {"Authorization": value}
            for path in ("/tensors", "/tensors/scalar/data", "/archives", "/metrics", "/openapi.json",
                         "/archives/nope/tensors", "/no/such/route"):  # fmt: skip
                response = await client.get(path, headers=headers)
                error = assert_json_error(response, 401)
                assert error["code"] == "unauthorized"
                assert response.headers["www-authenticate"] == "Bearer"
                assert token not in response.text
            head = await client.head("/tensors/scalar/data", headers=headers)
            assert head.status_code == 401
        ok = {"Authorization": f"Bearer {token}"}
        assert (await client.get("/tensors/scalar/data", headers=ok)).status_code == 200
        assert (await client.get("/healthz")).status_code == 200  # open
        assert token not in (await client.get("/healthz")).text
        # OPTIONS passes the token check (for CORS preflights) but serves nothing: the methods
        options = await client.options("/tensors/scalar/data")
        assert options.status_code == 204 and options.content == b""
        assert options.headers["allow"] == "GET, HEAD, OPTIONS"
        # a trailing-slash or case variant of the open path is not open
        for path in ("/healthz/", "/HEALTHZ", "//healthz", "/healthz/../tensors"):
            response = await client.get(path)
            # httpx sends "//healthz" as "/" (host "healthz"): the viewer's page shell, open and data-free
            shell = path == "//healthz" and response.headers["content-type"].startswith("text/html")
            assert response.status_code == 401 or shell, path


async def test_cors_preflight_from_a_disallowed_origin_grants_nothing() -> None:
    app = make_app([LAYOUTS], cors_origins=("https://ok.example",), api_token="tok")
    async with in_process(app) as client:
        for origin in ("https://evil.example", "https://ok.example.evil.example", "null",
                       "https://OK.example:443", "http://ok.example"):  # fmt: skip
            preflight = await client.options(
                "/tensors/scalar/data",
                headers={"Origin": origin, "Access-Control-Request-Method": "GET",
                         "Access-Control-Request-Headers": "authorization, range"},
            )  # fmt: skip
            assert preflight.status_code >= 400, (origin, preflight.status_code)
            assert preflight.headers.get("access-control-allow-origin") in (None, "https://ok.example")
            assert preflight.headers.get("access-control-allow-origin") != origin
            assert "access-control-allow-credentials" not in preflight.headers
            simple = await client.get("/tensors/scalar/data", headers={"Origin": origin})
            assert simple.status_code == 401
            assert simple.headers.get("access-control-allow-origin") != origin
        ok = await client.options(
            "/tensors/scalar/data",
            headers={"Origin": "https://ok.example", "Access-Control-Request-Method": "GET"},
        )
        assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "https://ok.example"
        for method in ("DELETE", "PUT", "POST"):
            refused = await client.options(
                "/tensors/scalar/data",
                headers={"Origin": "https://ok.example", "Access-Control-Request-Method": method},
            )
            assert refused.status_code >= 400, method


async def test_cors_preflight_refusal_is_a_json_error() -> None:
    """The error contract (docs/architecture.md) holds for refused preflights too."""
    async with in_process(make_app([LAYOUTS], cors_origins=("https://ok.example",))) as client:
        preflight = await client.options(
            "/tensors/scalar/data",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"},
        )
        assert_json_error(preflight)


async def test_unsupported_scheme_location_does_not_leak_credentials(caplog) -> None:
    """An operator typo (ftp://user:password@...) must not publish the password in /archives."""
    caplog.set_level(logging.INFO)
    location = f"ftp://user:{USERINFO_PASSWORD}@example.invalid/x.pt2?X-Amz-Signature={SIGNATURE}"
    async with in_process(make_app([LAYOUTS, f"typo={location}"])) as client:
        responses = await sweep(client, ["typo"])
        assert_no_secret(responses, caplog)


async def test_internal_errors_carry_no_traceback(caplog) -> None:
    """Every error path reachable from outside answers JSON; none shows Python internals."""
    async with in_process(make_app([LAYOUTS, f"pickled={ARCHIVES / 'pickled.pt2'}"])) as client:
        cases = [
            ("GET", "/tensors/scalar/data?order=%00"), ("GET", "/tensors/scalar/data?format=../../x"),
            ("GET", "/tensors?kind=%FF"), ("GET", "/archives/pickled/tensors/sub/data"),
            ("GET", "/archives/pickled/safetensors?name=sub"),
            ("GET", "/archives/layouts/safetensors?name=nope"),
            ("GET", "/archives/layouts/safetensors?model=nope"), ("DELETE", "/tensors/scalar/data"),
            ("POST", "/archives"), ("PUT", "/tensors/scalar/layout"), ("GET", "/tensors/scalar/data?model="),
        ]  # fmt: skip
        for method, path in cases:
            response = await client.request(method, path)
            assert_json_error(response)
        response = await client.get("/tensors/scalar/data", headers={"If-None-Match": "\x7f" * 10_000})
        assert response.status_code in (200, 304)
        response = await client.get("/tensors/scalar/data", headers={"Accept": "a" * 10_000})
        assert_json_error(response, 406)
