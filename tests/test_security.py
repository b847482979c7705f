"""Hostile input against a real uvicorn and raw asyncio streams, where the bytes on the wire matter (dot
segments, NUL, malformed requests, limits), and secrets of remote sources that must never leave the
process (responses, errors, logs, metrics). The in-process checks are in test_security_rules.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import httpx
import pytest

from testing.faultserver import FaultServer, Status
from testing.paths import ARCHIVES
from testing.secret_sweeps import (
    PRESIGNED_CREDENTIAL,
    SECRET_KEY,
    SESSION_TOKEN,
    SIGNATURE,
    USERINFO_PASSWORD,
    assert_no_secret,
    sweep,
)
from testing.service import LAYOUTS, assert_json_error, free_port, in_process, make_app, real_server

pytestmark = pytest.mark.emulator


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


ACCESS_KEY = "AKIDLEAKCHECK0001"


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
            responses = await sweep(client, ids, light=endpoint == "unreachable")
            archives = {a["id"]: a for a in responses[1].json()["archives"]}
            if endpoint == "faultserver":
                assert archives["s3"]["status"] == "open" and archives["presigned"]["status"] == "open"
                signed = upstream.requests("/bucket/layouts.pt2")
                assert signed and all("authorization" in r.headers for r in signed)  # credentials were used
            else:
                assert archives["s3"]["status"] == "error"
            assert_no_secret(responses, caplog, extra=repr(archives))


async def test_credentials_against_real_s3_are_not_echoed(seaweed_s3, s3_env, caplog) -> None:
    """SeaweedFS refuses the wrong secret (403): the refusal is reported without the secret."""
    caplog.set_level(logging.INFO)
    seaweed_s3.upload(seaweed_s3.private_bucket, "sec/layouts.pt2", ARCHIVES / "layouts.pt2")
    s3_env.setenv("PT2SERVE_S3_ENDPOINT", seaweed_s3.endpoint)
    app = make_app([f"denied=s3://{seaweed_s3.private_bucket}/sec/layouts.pt2"])
    async with in_process(app) as client:
        responses = await sweep(client, ["denied"])
        archive = responses[1].json()["archives"][0]
        assert archive["status"] == "error" and "403" in archive["error"], archive
        assert_no_secret(responses, caplog)


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
