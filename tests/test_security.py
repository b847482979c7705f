"""Hostile input against the service: no client-chosen upstream, odd names, Range abuse, malformed
HTTP, auth, CORS, and secrets that must never leave the process (responses, errors, logs, metrics).

In process (httpx's ASGI transport) wherever httpx can say what we mean; a real uvicorn and raw
asyncio streams where the bytes on the wire matter (dot segments, NUL, malformed requests, limits).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import traceback

import httpx
import pytest

from testing.faultserver import FaultServer, Status
from testing.paths import ARCHIVES
from testing.service import assert_json_error, free_port, in_process, make_app, real_server

pytestmark = pytest.mark.emulator

LAYOUTS = f"layouts={ARCHIVES / 'layouts.pt2'}"


# --------------------------------------------------------------------------- raw HTTP over a real uvicorn


async def raw_exchange(url: str, request: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes to the server at `url`, read until it closes (or `timeout`), return what came."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        chunks = []
        try:
            async with asyncio.timeout(timeout):
                while data := await reader.read(65536):
                    chunks.append(data)
        except (TimeoutError, ConnectionError):
            pass
        return b"".join(chunks)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


def parse_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


def get(path: bytes, extra: bytes = b"") -> bytes:
    return b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra + b"\r\n"


# --------------------------------------------------------------------------- no client-controlled upstream


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


async def test_archive_ids_never_fetch_anything() -> None:
    """Unknown ids, traversal and URL-looking ids are 404 and the (watching) upstream hears nothing."""
    async with FaultServer() as upstream:
        upstream.put("/x.pt2", (ARCHIVES / "layouts.pt2").read_bytes())
        target = upstream.url("/x.pt2")
        ids = [
            "nope",
            "..%2F..",
            "..%2F..%2Fetc%2Fpasswd",
            "%2E%2E",
            target.replace("/", "%2F").replace(":", "%3A"),
            "http:%2F%2F127.0.0.1:" + str(upstream.port) + "%2Fx.pt2",
            "s3:%2F%2Fbucket%2Fkey",
            "file:%2F%2F%2Fetc%2Fpasswd",
            "%2Fetc%2Fpasswd",
            "layouts%00",
        ]
        async with in_process(make_app([LAYOUTS])) as client:
            for archive_id in ids:
                for suffix in ("/tensors", "/tensors/scalar/layout", "/tensors/scalar/data", "/safetensors"):
                    response = await client.get(f"/archives/{archive_id}{suffix}")
                    assert response.status_code == 404, (archive_id, suffix, response.text)
                    assert_json_error(response)
            # query parameters that look like locations are ignored, never fetched
            for key in ("url", "location", "src", "archive"):
                response = await client.get("/tensors/scalar/layout", params={key: target})
                assert response.status_code == 200
            response = await client.get("/tensors", params={"model": target})
            assert_json_error(response, 404)
        async with real_server(make_app([LAYOUTS])) as url:
            url_id = b"/archives/http://127.0.0.1:%d/x.pt2/tensors" % upstream.port
            for path in (
                b"/archives/../../tensors",
                url_id,
                b"/archives/%2e%2e/tensors",
                b"/../../etc/passwd",
            ):
                status, headers, body = parse_response(await raw_exchange(url, get(path)))
                assert status == 404, (path, status, body)
                assert headers["content-type"] == "application/json"
        assert upstream.log == [], [r.target for r in upstream.log]


# --------------------------------------------------------------------------- tensor names


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


async def test_very_long_names_and_params() -> None:
    long = "a" * 60_000  # httpx refuses URLs over 64 KiB; the 100 KB name goes over the wire below
    async with in_process(make_app([LAYOUTS])) as client:
        response = await client.get(f"/tensors/{long}/layout")
        assert_json_error(response, 404)
        response = await client.get("/tensors/scalar/data", params={"model": long})
        assert_json_error(response, 404)
        response = await client.get("/tensors/x/layout", headers={"X-Name": "a" * 100_000})
        assert_json_error(response, 404)
        response = await client.get("/tensors", params={"prefix": long})
        assert response.status_code == 200 and response.json()["tensors"] == []
    async with real_server(make_app([LAYOUTS])) as url:
        raw = await raw_exchange(url, get(b"/tensors/" + b"a" * 100_000 + b"/layout"))
        status, headers, _ = parse_response(raw)
        assert 400 <= status < 500, status
        if status == 404:
            assert headers["content-type"] == "application/json"
        async with httpx.AsyncClient(base_url=url) as client:  # still serving
            assert (await client.get("/tensors/scalar/layout")).status_code == 200


async def test_dot_segments_nul_and_control_bytes_on_the_wire() -> None:
    async with real_server(make_app([LAYOUTS])) as url:
        cases = {
            b"/tensors/../../../etc/passwd/layout": {404},
            b"/tensors/./scalar/../scalar/layout": {404},  # names are taken literally, not normalised
            b"/tensors/%2e%2e/%2e%2e/layout": {404},
            b"/tensors/scalar%00/layout": {404},
            b"/tensors/scalar\x00/layout": {400},  # a raw NUL is not HTTP: the parser refuses
            b"/tensors/sca\tlar/layout": {400, 404},
            b"/tensors/\xff\xfe/layout": {400, 404},
        }
        for path, statuses in cases.items():
            status, headers, body = parse_response(await raw_exchange(url, get(path)))
            assert status in statuses, (path, status, body)
            assert b"Traceback" not in body
            if status == 404:
                assert headers["content-type"] == "application/json"
                assert b"root:" not in body


# --------------------------------------------------------------------------- Range abuse


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


# --------------------------------------------------------------------------- malformed HTTP, big headers


async def test_malformed_requests_get_4xx_and_the_server_survives() -> None:
    async with real_server(make_app([LAYOUTS])) as url:
        requests = [  # a loopback Host: any other would be refused (421) before the rest is looked at
            b"GARBAGE\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,  # a TLS ClientHello
            b"GET /healthz HTTP/9.9\r\nHost: [::1]\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nHost: [::1]\r\nBad Header\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nHost: [::1]\r\nX: a\x00b\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nHost: [::1]\r\nContent-Length: -1\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nHost: [::1]\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"0\r\n\r\nGET /metrics HTTP/1.1\r\nHost: [::1]\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nHost: [::1]\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"GET /tensors/scalar/data HTTP/1.1\r\nHost: [::1]\r\nRange: bytes=0-1\r\nRange: bytes=2-3\r\n"
            b"Connection: close\r\n\r\n",
        ]
        for request in requests:
            raw = await raw_exchange(url, request, timeout=3)
            assert b"Traceback" not in raw
            if raw.startswith(b"HTTP/1.1 "):
                status, _, _ = parse_response(raw)
                assert status < 500, (request[:60], raw[:300])
                # a smuggled second request must not be answered as a separate request
                assert raw.count(b"HTTP/1.1 ") <= 1 or b"pt2serve_" not in raw, raw[:500]
        async with httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/healthz")).status_code == 200


async def test_oversized_headers_are_refused_or_bounded() -> None:
    """One 100 KB header and 2 MB of headers: refused by the server (or served), never a crash/hang."""
    async with real_server(make_app([LAYOUTS])) as url:
        for extra in (b"X-Big: " + b"a" * 100_000 + b"\r\n",
                      b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 1000) for i in range(2000))):  # fmt: skip
            raw = await raw_exchange(url, get(b"/tensors/scalar/layout", extra), timeout=10)
            if raw:
                status, _, _ = parse_response(raw)
                assert status in (200, 400, 413, 431), status
        async with httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/healthz")).status_code == 200


# --------------------------------------------------------------------------- bearer token


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


async def test_bearer_token_on_the_wire_duplicate_headers() -> None:
    token = "wire-token"
    async with real_server(make_app([LAYOUTS], api_token=token)) as url:
        good = b"Authorization: Bearer wire-token\r\n"
        bad = b"Authorization: Bearer nope\r\n"
        for extra in (bad + good, good + bad, good + good):  # two fields: refused, whichever is right
            status, _, body = parse_response(await raw_exchange(url, get(b"/tensors/scalar/layout", extra)))
            assert status == 400 and b'"ambiguous_request"' in body, (extra, status)
        extra = b"Authorization: Bearer wire-token, Bearer x\r\n"
        status, _, body = parse_response(await raw_exchange(url, get(b"/tensors/scalar/layout", extra)))
        assert status == 401 and body.startswith(b'{"error"')
        status, _, _ = parse_response(await raw_exchange(url, get(b"/tensors/scalar/layout", good)))
        assert status == 200


# --------------------------------------------------------------------------- CORS


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


# --------------------------------------------------------------------------- secrets stay inside


SECRET_KEY = "super-secret-value"
ACCESS_KEY = "AKIDLEAKCHECK0001"
SESSION_TOKEN = "session-token-leak-check"
SIGNATURE = "secret-sig-9f8e7d"
PRESIGNED_CREDENTIAL = "AKIDPRESIGNED0002"
USERINFO_PASSWORD = "hunter2-userinfo"
SECRETS = (SECRET_KEY, SESSION_TOKEN, SIGNATURE, PRESIGNED_CREDENTIAL, USERINFO_PASSWORD, "X-Amz-Signature")


async def _sweep(
    client: httpx.AsyncClient, archive_ids: list[str], light: bool = False
) -> list[httpx.Response]:
    paths = ["/healthz", "/archives", "/metrics", "/tensors", "/openapi.json", "/docs", "/stats"]
    if light:  # each request for a failed archive re-opens it (5 attempts): one request per archive
        return [await client.get(p) for p in paths[:3]] + [
            await client.get(f"/archives/{a}/tensors/scalar/data") for a in archive_ids
        ]
    for archive_id in archive_ids:
        paths += [f"/archives/{archive_id}/tensors", f"/archives/{archive_id}/tensors/scalar/layout",
                  f"/archives/{archive_id}/tensors/scalar/data", f"/archives/{archive_id}/tensors/nope/data",
                  f"/archives/{archive_id}/safetensors"]  # fmt: skip
    responses = [await client.get(path) for path in paths]
    responses.append(await client.get("/metrics"))  # after the traffic
    return responses


def _assert_no_secret(responses: list[httpx.Response], caplog, extra: str = "") -> None:
    texts = [extra]
    for response in responses:
        texts.append(response.text)
        texts.extend(f"{k}: {v}" for k, v in response.headers.items())
        if response.status_code >= 400:
            assert_json_error(response)
    for record in caplog.records:
        texts.append(record.getMessage())
        if record.exc_info:
            texts.append("".join(traceback.format_exception(*record.exc_info)))
    texts.append(caplog.text)
    blob = "\n".join(texts)
    leaks = {secret for secret in SECRETS if secret in blob}
    lines = [line for line in blob.splitlines() if any(secret in line for secret in leaks)]
    assert not leaks, f"secrets {sorted(leaks)} leaked: {lines[:5]}"


@pytest.fixture
def s3_env(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("endpoint", ["faultserver", "unreachable"])
async def test_credentials_never_leave_the_service(endpoint, s3_env, caplog) -> None:
    """s3:// with secret env credentials (served, or unreachable) and presigned / userinfo URLs.

    Logs are captured at INFO, the level an operator runs with (`--log-level info` is the CLI default);
    botocore's DEBUG canonical-request dump (x-amz-security-token) is out of scope here."""
    caplog.set_level(logging.INFO)
    data = (ARCHIVES / "layouts.pt2").read_bytes()
    async with FaultServer() as upstream:
        upstream.put("/bucket/layouts.pt2", data)
        upstream.put("/signed/layouts.pt2", data)
        base = upstream.base_url if endpoint == "faultserver" else f"http://127.0.0.1:{free_port()}"
        s3_env.setenv("PT2SERVE_S3_ENDPOINT", base)
        presigned = (f"{base}/signed/layouts.pt2?X-Amz-Algorithm=AWS4-HMAC-SHA256"
                     f"&X-Amz-Credential={PRESIGNED_CREDENTIAL}%2F20260101%2Fus-east-1%2Fs3%2Faws4_request"
                     f"&X-Amz-Signature={SIGNATURE}")  # fmt: skip
        userinfo = f"http://user:{USERINFO_PASSWORD}@{base.removeprefix('http://')}/signed/layouts.pt2"
        specs = ["s3=s3://bucket/layouts.pt2", f"presigned={presigned}", f"userinfo={userinfo}",
                 f"missing={base}/signed/nope.pt2?X-Amz-Signature={SIGNATURE}"]  # fmt: skip
        app = make_app(specs)
        async with in_process(app) as client:
            ids = ["s3", "presigned", "userinfo", "missing"]
            responses = await _sweep(client, ids, light=endpoint == "unreachable")
            archives = {a["id"]: a for a in responses[1].json()["archives"]}
            if endpoint == "faultserver":
                assert archives["s3"]["status"] == "open" and archives["presigned"]["status"] == "open"
                signed = upstream.requests("/bucket/layouts.pt2")
                assert signed and all("authorization" in r.headers for r in signed)  # credentials were used
            else:
                assert archives["s3"]["status"] == "error"
            _assert_no_secret(responses, caplog, extra=repr(archives))


async def test_credentials_against_real_s3_are_not_echoed(seaweed_s3, s3_env, caplog) -> None:
    """SeaweedFS refuses the wrong secret (403): the refusal is reported without the secret."""
    caplog.set_level(logging.INFO)
    seaweed_s3.upload(seaweed_s3.private_bucket, "sec/layouts.pt2", ARCHIVES / "layouts.pt2")
    s3_env.setenv("PT2SERVE_S3_ENDPOINT", seaweed_s3.endpoint)
    app = make_app([f"denied=s3://{seaweed_s3.private_bucket}/sec/layouts.pt2"])
    async with in_process(app) as client:
        responses = await _sweep(client, ["denied"])
        archive = responses[1].json()["archives"][0]
        assert archive["status"] == "error" and "403" in archive["error"], archive
        _assert_no_secret(responses, caplog)


async def test_unsupported_scheme_location_does_not_leak_credentials(caplog) -> None:
    """An operator typo (ftp://user:password@...) must not publish the password in /archives."""
    caplog.set_level(logging.INFO)
    location = f"ftp://user:{USERINFO_PASSWORD}@example.invalid/x.pt2?X-Amz-Signature={SIGNATURE}"
    async with in_process(make_app([LAYOUTS, f"typo={location}"])) as client:
        responses = await _sweep(client, ["typo"])
        _assert_no_secret(responses, caplog)


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


async def test_requests_for_a_failed_remote_archive_do_not_amplify_upstream_traffic() -> None:
    """A remote archive that failed to open (storage answers 500): each client request re-opens it with
    the full retry budget (5 attempts, ~1.5-3 s of backoff), so any client can make the service hammer
    the storage and tie up a request for seconds. Expected: a failed archive is retried on a schedule
    (revalidation) or with a back-off, and requests meanwhile answer 503 at once."""
    async with FaultServer() as upstream:
        upstream.put("/x.pt2", (ARCHIVES / "layouts.pt2").read_bytes())
        upstream.faults.append(Status(500, times=None))
        async with in_process(make_app([LAYOUTS, f"broken={upstream.url('/x.pt2')}"])) as client:
            at_start = len(upstream.log)
            responses = await asyncio.gather(*(client.get("/archives/broken/tensors") for _ in range(3)))
            for response in responses:
                assert_json_error(response, 503)
            caused = len(upstream.log) - at_start
        assert caused <= 1, f"3 client requests caused {caused} upstream requests"
