"""Opening a location a client names is safe by construction (POST /archives/open, --allow-open), where
real loopback servers take part: an http(s) host, or any redirect's, that resolves to a loopback,
private, link-local (cloud metadata) or IPv6 loopback address is refused before anything connects to
it, unless a pattern names the host, also through proxies and redirects; dot segments never leave the
pattern; a failed open tells its rule and nothing of the upstream; the bound on opens in progress
applies. The checks that need no socket are in test_open_safety_rules.py.

"No request reached the refused address" is checked two ways: loopback listening sockets count the
connections they accept (they must stay at zero), and a Python audit hook records every
`socket.connect` this process makes, so the 10.x and 169.254.169.254 cases assert that nothing
connected there at all (those addresses are never sent a packet: the refusal happens first).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys

import numpy as np
import pytest

import reader
from testing.faultserver import FaultServer, Status
from testing.forward_proxy import ForwardProxy
from testing.open_requests import (
    FLOAT32,
    assert_refused,
    open_location,
    opener,
    small_archive,
)
from testing.service import in_process, make_app
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator


CONNECTS: list[tuple] | None = None  # socket.connect addresses while a test records them


def _audit(event: str, args: tuple) -> None:
    if event == "socket.connect" and CONNECTS is not None:
        CONNECTS.append(args[1])


sys.addaudithook(_audit)  # audit hooks stay for the process: it records only inside `recording()`


@contextlib.contextmanager
def recording():
    global CONNECTS
    CONNECTS = []
    try:
        yield CONNECTS
    finally:
        CONNECTS = None


def connected_hosts(connects: list) -> set[str]:
    return {str(address[0]) for address in connects if isinstance(address, tuple)}


class Listener:
    """A loopback socket that counts the connections it accepts (and closes them)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host, self.accepted, self.server = host, 0, None

    async def __aenter__(self) -> Listener:
        async def accept(reader, writer):
            self.accepted += 1
            writer.close()

        self.server = await asyncio.start_server(accept, self.host, 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.server.close()
        await self.server.wait_closed()


def have_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


def big_archive(path) -> bytes:
    """A tensor of 2 MiB: its read is worth parts over several connections."""
    write_pt2(path, {"big": (FLOAT32, [512, 1024], np.ones(512 * 1024, dtype=np.float32).tobytes())})
    return path.read_bytes()


def assert_not_global(response, *unsaid: str) -> None:
    """Refused by the address rule, which the message names without the host or its addresses."""
    message = assert_refused(response, "not a global unicast address")
    for word in unsaid:
        assert word not in message, message


REFUSED_HOSTS = [
    ("loopback.test", "127.0.0.1", "loopback"),
    ("private.test", "10.20.30.40", "private"),
    ("metadata.test", "169.254.169.254", "cloud metadata"),
    ("mixed.test", "10.0.0.1", "private"),  # any one address refused refuses the host
    ("10.20.30.40", "10.20.30.40", "private"),  # literal addresses: no resolver involved
    ("169.254.169.254", "169.254.169.254", "cloud metadata"),
    ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1", "loopback"),
]


@pytest.mark.parametrize(("host", "address", "reason"), REFUSED_HOSTS)
async def test_hosts_on_internal_addresses_are_refused_before_any_connection(host, address, reason, caplog):
    async with Listener() as listener, in_process(opener(allow_open=("http://*:*/*",))) as client:
        port = listener.port if address.endswith("127.0.0.1") else 80
        with recording() as connects, caplog.at_level("WARNING", "pt2serve"):
            response = await open_location(client, f"http://{host}:{port}/model.pt2")
        assert_not_global(response, address)
        assert address in caplog.text and reason in caplog.text  # the details: in the server's log only
        assert listener.accepted == 0
        assert not connected_hosts(connects) & {
            address,
            "127.0.0.1",
            "10.20.30.40",
            "169.254.169.254",
            "10.0.0.1",
        }
        assert not any(a.get("opened") for a in (await client.get("/archives")).json()["archives"])


async def test_localhost_through_the_system_resolver_is_refused():
    async with Listener() as listener, in_process(make_app(allow_open=("http://*:*/*",))) as client:
        with recording() as connects:
            response = await open_location(client, f"http://localhost:{listener.port}/model.pt2")
        assert_not_global(response, "127.0.0.1")
        assert listener.accepted == 0 and not connects


@pytest.mark.skipif(not have_ipv6_loopback(), reason="no IPv6 loopback here")
@pytest.mark.parametrize("host", ["v6loop.test", "[::1]"])
async def test_ipv6_loopback_is_refused(host):
    async with Listener("::1") as listener, in_process(opener(allow_open=("http://*:*/*",))) as client:
        with recording() as connects:
            response = await open_location(client, f"http://{host}:{listener.port}/model.pt2")
        assert_not_global(response, "::1")
        assert listener.accepted == 0 and not connects


REDIRECT_TARGETS = [
    ("http://loopback.test:{port}/model.pt2", "127.0.0.1"),
    ("http://localhost:{port}/model.pt2", "127.0.0.1"),
    ("http://private.test/model.pt2", "10.20.30.40"),
    ("http://10.20.30.40/model.pt2", "10.20.30.40"),
    ("http://metadata.test/latest/meta-data/iam", "169.254.169.254"),
    ("http://169.254.169.254/latest/meta-data/iam", "169.254.169.254"),
]


REDIRECT_PATTERNS = {
    "patterns": ("http://127.0.0.1:*/*",),
    "addresses": ("http://127.0.0.1:*/*", "http://*:*/**"),
}


@pytest.mark.parametrize("patterns", REDIRECT_PATTERNS)
@pytest.mark.parametrize(("target", "address"), REDIRECT_TARGETS)
async def test_a_redirect_to_an_internal_address_is_refused(tmp_path, target, address, patterns):
    """The origin is allowed (its pattern names 127.0.0.1); its redirect is checked like any host."""
    data = small_archive(tmp_path / "m.pt2")
    async with Listener() as listener, FaultServer() as origin:
        origin.put("/m.pt2", data)
        origin.faults.append(Status(code=302, times=None, path="/m.pt2",
                                    headers={"Location": target.format(port=listener.port)}))  # fmt: skip
        app = opener(allow_open=REDIRECT_PATTERNS[patterns])
        async with in_process(app) as client:
            with recording() as connects:
                response = await open_location(client, origin.url("/m.pt2"))
        if patterns == "addresses" and "localhost" not in target and "loopback.test" not in target:
            assert_not_global(response, address)
        else:  # a loopback name on the origin's own host: named by the first pattern, or refused
            message = assert_refused(response)
            assert address not in message and "loopback.test" not in message
        assert len(origin.requests("/m.pt2")) == 1  # the origin was asked, once; the target never
        assert listener.accepted == 0
        assert connected_hosts(connects) == {"127.0.0.1"}  # the origin only
        assert all(port == origin.port for _, port, *rest in connects)


@pytest.mark.skipif(not have_ipv6_loopback(), reason="no IPv6 loopback here")
async def test_a_redirect_to_ipv6_loopback_is_refused(tmp_path):
    data = small_archive(tmp_path / "m.pt2")
    async with Listener("::1") as listener, FaultServer() as origin:
        origin.put("/m.pt2", data)
        target = f"http://v6loop.test:{listener.port}/model.pt2"
        origin.faults.append(Status(code=307, times=None, path="/m.pt2", headers={"Location": target}))
        async with in_process(opener(allow_open=("http://127.0.0.1:*/*",))) as client:
            message = assert_refused(await open_location(client, origin.url("/m.pt2")))
            assert "::1" not in message and "v6loop" not in message
        assert listener.accepted == 0


async def test_a_named_host_is_allowed_and_read_at_the_address_the_guard_checked(tmp_path):
    """`named.test` resolves only through the guard's resolver (no DNS knows it): the open, a small
    read (aiohttp) and a 2 MiB read (the bulk pool) all succeed, so every connection went to the
    address the guard answered rather than to a second lookup of the name."""
    data = big_archive(tmp_path / "big.pt2")
    async with FaultServer() as origin:
        origin.put("/big.pt2", data)
        location = f"http://named.test:{origin.port}/big.pt2"
        async with in_process(opener(allow_open=("http://named.test:*/*",))) as client:
            response = await open_location(client, location)
            assert response.status_code == 200, response.text
            opened = response.json()
            assert opened["opened"] is True and opened["location"] == location
            body = await client.get(f"/archives/{opened['id']}/tensors/big/data")
            assert body.status_code == 200 and body.content == np.ones(512 * 1024, np.float32).tobytes()
            part = await client.get(
                f"/archives/{opened['id']}/tensors/big/data", headers={"Range": "bytes=0-15"}
            )
            assert part.status_code == 206 and part.content == np.ones(4, np.float32).tobytes()
        assert origin.requests("/big.pt2")


async def test_a_redirect_between_named_hosts_is_followed(tmp_path):
    data = small_archive(tmp_path / "m.pt2")
    async with FaultServer() as origin:
        origin.put("/final.pt2", data)
        origin.faults.append(Status(code=302, times=None, path="/m.pt2",
                                    headers={"Location": origin.url("/final.pt2")}))  # fmt: skip
        async with in_process(opener(allow_open=("http://127.0.0.1:*/*",))) as client:
            response = await open_location(client, origin.url("/m.pt2"))
            assert response.status_code == 200, response.text
            tensors = (await client.get(f"/archives/{response.json()['id']}/tensors")).json()["tensors"]
            assert [t["name"] for t in tensors] == ["w"]


async def test_an_opened_location_is_shown_without_its_query(tmp_path):
    """A presigned URL's signature is a credential: the listing (and so the viewer) never shows it."""
    data = small_archive(tmp_path / "m.pt2")
    async with FaultServer() as origin:
        origin.put("/m.pt2", data)
        location = origin.url("/m.pt2") + "?X-Amz-Signature=s3cr3t&X-Amz-Credential=AKIA"
        async with in_process(opener(allow_open=("http://127.0.0.1:*/*?*",))) as client:
            opened = await open_location(client, location)
            assert opened.status_code == 200, opened.text
            assert opened.json()["location"] == origin.url("/m.pt2")
            listing = (await client.get("/archives")).text
            assert "s3cr3t" not in listing and "AKIA" not in listing
        assert origin.requests("/m.pt2")[0].target.endswith("X-Amz-Credential=AKIA")  # the query was sent


async def test_through_a_proxy_the_target_host_is_checked_before_the_proxy_is_asked(tmp_path, monkeypatch):
    """With HTTP_PROXY the proxy connects; the guard is asked about each target host first, so a refused
    host (or redirect target) is never named to the proxy."""
    data = small_archive(tmp_path / "m.pt2")
    for variable in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(variable, raising=False)
    async with Listener() as listener, FaultServer() as origin, ForwardProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        origin.put("/final.pt2", data)
        target = f"http://loopback.test:{listener.port}/m.pt2"
        origin.faults.append(Status(code=302, times=None, path="/m.pt2", headers={"Location": target}))
        async with in_process(opener(allow_open=("http://*:*/*",))) as client:
            assert_not_global(await open_location(client, f"http://loopback.test:{listener.port}/m.pt2"))
            assert proxy.log == []
        async with in_process(opener(allow_open=("http://127.0.0.1:*/*", "http://*:*/*"))) as client:
            assert_not_global(await open_location(client, origin.url("/m.pt2")), "loopback.test")
            assert [entry["target"] for entry in proxy.log] == [origin.url("/m.pt2")]  # the origin only
            allowed = await open_location(client, origin.url("/final.pt2"))
            assert allowed.status_code == 200, allowed.text
            assert proxy.log[-1]["target"] == origin.url("/final.pt2")  # and it did go through the proxy
        assert listener.accepted == 0


async def test_through_a_proxy_the_connection_goes_to_the_address_checked(tmp_path, monkeypatch):
    """The proxy once resolved an opened host's name itself, after the guard had checked it: a name
    rebinding between the two reached whatever the proxy could route to. Now the proxy is asked for a
    tunnel to the address the guard answered, so it resolves nothing (here it could not: the name is
    the test's own), and the origin still sees the name in its Host field."""
    data = small_archive(tmp_path / "m.pt2")
    for variable in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(variable, raising=False)
    async with FaultServer() as origin, ForwardProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        origin.put("/m.pt2", data)
        app = opener(allow_open=(f"http://named.test:{origin.port}/**",))  # named: 127.0.0.1 allowed
        async with in_process(app) as client:
            opened = await open_location(client, f"http://named.test:{origin.port}/m.pt2")
            assert opened.status_code == 200, opened.text
            layout = await client.get(f"/archives/{opened.json()['id']}/tensors/w/data")
            assert layout.content == np.arange(16, dtype=np.float32).tobytes()
        assert proxy.log and all(entry["method"] == "CONNECT" for entry in proxy.log)
        assert {entry["target"] for entry in proxy.log} == {f"127.0.0.1:{origin.port}"}
        assert {request.headers.get("host") for request in origin.log} == {f"named.test:{origin.port}"}


async def test_a_host_glob_does_not_reach_into_the_path():
    """`*` of `http://*.example.com/*` once matched `127.0.0.1:PORT/.example.com/x.pt2` (fnmatch)."""
    async with Listener() as listener, in_process(opener(allow_open=("http://*.example.com/*",))) as client:
        with recording() as connects:
            response = await open_location(client, f"http://127.0.0.1:{listener.port}/.example.com/x.pt2")
        assert_refused(response, "matches no --allow-open pattern")
        assert listener.accepted == 0 and not connects


async def test_a_named_host_is_reached_on_its_patterns_port_and_path_only(tmp_path):
    """A pattern naming 127.0.0.1 once exempted that host from the address rule on every port and path,
    whatever pattern the location matched."""
    data = small_archive(tmp_path / "m.pt2")
    async with FaultServer() as allowed, FaultServer() as other:
        other.put("/models/m.pt2", data)
        allowed.put("/admin/secret", data)
        allowed.put("/models/m.pt2", data)
        app = opener(allow_open=(f"http://127.0.0.1:{allowed.port}/models/*", "http://*:*/**"))
        async with in_process(app) as client:
            assert_not_global(await open_location(client, other.url("/models/m.pt2")))  # another port
            assert_refused(await open_location(client, allowed.url("/admin/secret")), "matches no")  # path
            assert other.log == [] and allowed.log == []
            inside = await open_location(client, allowed.url("/models/m.pt2"))
            assert inside.status_code == 200, inside.text


async def test_dot_segments_never_reach_the_server_resolved(tmp_path):
    """`/models/../admin/secret` once arrived as `GET /admin/secret` (httpx resolves `..` first)."""
    data = small_archive(tmp_path / "m.pt2")
    async with FaultServer() as origin:
        origin.put("/admin/secret", data)
        app = opener(allow_open=(f"http://127.0.0.1:{origin.port}/models/*",))
        async with in_process(app) as client:
            for path in (
                "/models/../admin/secret",
                "/models/%2e%2e/admin/secret",
                "/models/./../admin/secret",
            ):
                response = await open_location(client, origin.base_url + path)
                assert_refused(response, "'..'")
        assert origin.log == []


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:{other}/models/m.pt2",  # the named host, another port
        "/models/../admin/secret",  # resolved by the client: /admin/secret
        "/admin/secret",  # the named host and port, outside the pattern's path
        "http://127.0.0.1:{other}/models/m.pt2?x=1",
    ],
)
async def test_a_redirect_out_of_the_pattern_is_refused_before_it_is_followed(tmp_path, target, caplog):
    data = small_archive(tmp_path / "m.pt2")
    async with FaultServer() as origin, FaultServer() as other:
        other.put("/models/m.pt2", data)
        origin.put("/admin/secret", data)
        location = target.format(other=other.port)
        origin.faults.append(
            Status(code=302, times=None, path="/models/m.pt2", headers={"Location": location})
        )
        app = opener(allow_open=(f"http://127.0.0.1:{origin.port}/models/*",))
        async with in_process(app) as client:
            with caplog.at_level("WARNING", "pt2serve"):
                response = await open_location(client, origin.url("/models/m.pt2"))
        message = assert_refused(response, "a redirect leads outside the --allow-open patterns")
        assert str(other.port) not in message and "admin" not in message
        assert other.log == []
        assert [r.path for r in origin.log] == ["/models/m.pt2"]  # asked once; /admin/secret never
        assert "/admin/secret" in caplog.text or str(other.port) in caplog.text  # the details: logged


def _s3_environment(monkeypatch, endpoint: str) -> None:
    for name in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_NO_SIGN_REQUEST",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PT2SERVE_S3_ENDPOINT", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


async def test_dot_segments_in_an_s3_key_never_leave_the_allowed_bucket(tmp_path, monkeypatch):
    """`s3://team-models/../other-bucket/secret.pt2` once sent a signed `GET /other-bucket/secret.pt2`."""
    data = small_archive(tmp_path / "m.pt2")
    async with FaultServer() as storage:  # an S3 endpoint, path-style
        storage.put("/team-models/m.pt2", data)
        storage.put("/other-bucket/secret.pt2", data)
        _s3_environment(monkeypatch, storage.base_url)
        async with in_process(make_app(allow_open=("s3://team-models/*",))) as client:
            for key in (
                "../other-bucket/secret.pt2",
                "%2e%2e/other-bucket/secret.pt2",
                "./../other-bucket/secret.pt2",
            ):
                assert_refused(await open_location(client, f"s3://team-models/{key}"), "'..'")
            assert storage.log == []
            allowed = await open_location(client, "s3://team-models/m.pt2")
            assert allowed.status_code == 200, allowed.text
        assert {r.path for r in storage.log} == {"/team-models/m.pt2"}
        assert "authorization" in storage.log[0].headers  # signed with the server's credentials


@pytest.mark.parametrize("location", ["s3://team-models/../other-bucket/secret.pt2",
                                      "az://team/../othercontainer/secret.pt2"])  # fmt: skip
async def test_the_reader_refuses_a_key_with_dot_segments_before_any_request(tmp_path, monkeypatch, location):
    data = small_archive(tmp_path / "m.pt2")
    async with FaultServer() as storage:
        storage.put("/other-bucket/secret.pt2", data)
        storage.put("/acct/othercontainer/secret.pt2", data)
        _s3_environment(monkeypatch, storage.base_url)
        monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
        monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "acct")
        monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", "sv=2023-11-03&sig=c2lnbmF0dXJl")
        monkeypatch.setenv("PT2SERVE_AZURE_BLOB_ENDPOINT", f"{storage.base_url}/acct")
        with pytest.raises(reader.LocationError, match="segment"):
            async with reader.open_archive(location):
                pass
        assert storage.log == []


async def test_a_failed_open_tells_the_rule_without_upstream_statuses_hosts_or_ports(tmp_path, caplog):
    """Else the Open box is a port scanner: which ports answer, with what status, at what address."""
    closed = Listener()
    async with closed:
        closed_port = closed.port
    async with FaultServer() as origin:
        origin.faults.append(Status(code=403, times=None, path="/forbidden.pt2"))
        app = opener(allow_open=("http://127.0.0.1:*/*", "http://*:*/**"))
        async with in_process(app) as client:
            with caplog.at_level("WARNING", "pt2serve"):
                missing = await open_location(client, origin.url("/missing.pt2"))
                forbidden = await open_location(client, origin.url("/forbidden.pt2"))
                unreachable = await open_location(client, f"http://127.0.0.1:{closed_port}/m.pt2")
                internal = await open_location(client, "http://private.test/m.pt2")
    for response in (missing, forbidden, unreachable):
        assert response.status_code == 502, response.text
        error = response.json()["error"]
        assert error["code"] == "upstream_error"
        for leak in (
            "404",
            "403",
            "HTTP",
            str(origin.port),
            str(closed_port),
            "127.0.0.1",
            "onnect",
            "Errno",
        ):
            assert leak not in error["message"], error["message"]
    assert "does not have it" in missing.json()["error"]["message"]
    assert "did not answer" in unreachable.json()["error"]["message"]
    assert_not_global(internal, "10.20.30.40", "private.test")
    for detail in ("404", "403", str(closed_port), "10.20.30.40"):  # the details went to the log
        assert detail in caplog.text, detail


async def test_an_opened_archive_failing_later_says_no_more_than_its_rule(tmp_path):
    """A read, a reopen and the listing of a client-opened archive whose origin went away: no status,
    host or port of the upstream in any answer."""
    data = big_archive(tmp_path / "big.pt2")
    async with FaultServer() as origin:
        origin.put("/big.pt2", data)
        async with in_process(opener(allow_open=("http://127.0.0.1:*/*",))) as client:
            opened = (await open_location(client, origin.url("/big.pt2"))).json()
            origin.remove("/big.pt2")
            answers = [await client.get(f"/archives/{opened['id']}/tensors/big/data") for _ in range(2)]
            listing = (await client.get("/archives")).json()["archives"]
    assert all(answer.status_code >= 500 for answer in answers), [a.text for a in answers]
    failed = next(archive for archive in listing if archive["id"] == opened["id"])
    assert failed["status"] == "error"
    for text in [*(answer.json()["error"]["message"] for answer in answers), failed["error"]]:
        said = text.replace(opened["id"], "<id>")  # the id is a digest: "404" may stand in it by chance
        for leak in ("404", "HTTP", str(origin.port)):
            assert leak not in said, text


async def test_opens_in_progress_are_bounded(tmp_path):
    data = small_archive(tmp_path / "m.pt2")
    async with FaultServer() as origin:
        origin.put("/a.pt2", data)
        origin.put("/b.pt2", data)
        origin.delay = 1.0
        app = opener(allow_open=("http://127.0.0.1:*/*",), open_concurrency=1)
        async with in_process(app) as client:
            first = asyncio.create_task(open_location(client, origin.url("/a.pt2")))
            while not origin.log:
                await asyncio.sleep(0.01)
            busy = await open_location(client, origin.url("/b.pt2"))
            assert busy.status_code == 503 and busy.json()["error"]["code"] == "opens_busy"
            assert busy.headers["retry-after"]
            assert (await first).status_code == 200
        assert not origin.requests("/b.pt2")
