"""Proxies from the environment on both transports (the HTTP/1.1 client, reader/sources/transport/http1/, and
httpx's HTTP/2), small reads and ranges of 1 MiB and more, through a forward proxy the tests own
(testing/forward_proxy.py) to nginx over http and https (a private CA's certificate, trusted
through HttpOptions.ca_bundle).

What goes through is checked on both ends: the proxy's log (CONNECT tunnels for https, absolute-form
requests for http, Proxy-Authorization) and nginx's (the ranges it served), with the bytes exact.
A proxy that cannot be reached or refuses is a SourceError naming it, never a direct connection."""

from __future__ import annotations

import dataclasses
import random

import pytest

from reader.errors import SourceError
from reader.sources import HttpOptions, HttpSource
from testing.forward_proxy import ForwardProxy
from testing.private_ca import https_origin
from testing.servers import free_port

pytestmark = pytest.mark.emulator

DATA = random.Random(26).randbytes(3 << 20)
SMALL = (10, 5000)
BULK = (1 << 20, 3 << 20)  # an explicit range of 2 MiB
FAST = HttpOptions(backoff_base=0.01, backoff_cap=0.05, read_timeout=5.0, time_budget=30.0)
VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(scope="module")
def origin(tmp_path_factory):
    with https_origin(tmp_path_factory.mktemp("proxies"), {"blob.bin": DATA}) as (ca, server):
        yield ca, server


@pytest.fixture(autouse=True)
def no_proxy_settings(monkeypatch):
    """Only what a test sets: none of the machine's own proxy variables."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.delenv("REQUEST_METHOD", raising=False)  # (urllib ignores HTTP_PROXY under CGI)


def _url(origin, scheme: str) -> str:
    _, server = origin
    return (server.tls_base_url if scheme == "https" else server.base_url) + "/blob.bin"


def _options(origin, **changes) -> HttpOptions:
    ca, _ = origin
    return dataclasses.replace(FAST, ca_bundle=str(ca.ca_file), **changes)


async def _read_small_and_big(url: str, options: HttpOptions) -> None:
    source = await HttpSource.open(url, options=options)
    try:
        assert await source.read(*SMALL) == DATA[slice(*SMALL)]
        assert await source.read(*BULK) == DATA[slice(*BULK)]
    finally:
        await source.close()


def _served_ranges(origin) -> list[str]:
    return [record["range"] for record in origin[1].take_log()]


@pytest.mark.parametrize(
    ("scheme", "variable", "http2"),
    [
        ("http", "HTTP_PROXY", False),
        ("http", "all_proxy", False),
        ("https", "https_proxy", False),
        ("https", "ALL_PROXY", False),
        ("http", "http_proxy", True),
        ("https", "HTTPS_PROXY", True),
    ],
)
async def test_every_body_path_goes_through_the_proxy(origin, monkeypatch, scheme, variable, http2):
    url = _url(origin, scheme)
    origin[1].take_log()
    async with ForwardProxy() as proxy:
        monkeypatch.setenv(variable, proxy.url)
        await _read_small_and_big(url, _options(origin, http2=http2))
    served = origin[1].take_log()
    ranges = [record["range"] for record in served]
    assert {f"bytes={SMALL[0]}-{SMALL[1] - 1}", f"bytes={BULK[0]}-{BULK[1] - 1}"} <= set(ranges)
    if scheme == "https":
        authority = url.split("/")[2]
        assert proxy.log and all(e["method"] == "CONNECT" and e["target"] == authority for e in proxy.log)
        # every byte nginx sent came back through a tunnel (TLS adds its framing): none went direct
        assert sum(e["bytes"] for e in proxy.log) >= sum(record["bytes"] for record in served)
    else:  # each request in absolute form, the ranges as nginx served them
        assert all(e["method"] == "GET" and e["target"] == url for e in proxy.log)
        assert sorted(e["range"] for e in proxy.log) == sorted(ranges)


@pytest.mark.parametrize(
    ("scheme", "no_proxy", "url_host"),
    [
        ("http", "127.0.0.1", "127.0.0.1"),
        ("https", "127.0.0.0/8", "127.0.0.1"),  # an IP network (httpx alone matches its first address)
        ("http", "*", "127.0.0.1"),
        ("https", "example.com, 10.0.0.0/8,127.0.0.1", "127.0.0.1"),
        ("http", "localhost", "localhost"),
    ],
)
async def test_no_proxy_goes_direct(origin, monkeypatch, scheme, no_proxy, url_host):
    url = _url(origin, scheme).replace("127.0.0.1", url_host)
    async with ForwardProxy() as proxy:
        for variable in ("HTTP_PROXY", "HTTPS_PROXY"):
            monkeypatch.setenv(variable, proxy.url)
        monkeypatch.setenv("no_proxy", no_proxy)
        await _read_small_and_big(url, _options(origin))
    assert proxy.log == []
    assert f"bytes={BULK[0]}-{BULK[1] - 1}" in _served_ranges(origin)


@pytest.mark.parametrize("no_proxy", ["example.com,.internal", "10.0.0.0/8", "127.0.0.2"])
async def test_no_proxy_rules_that_do_not_match_keep_the_proxy(origin, monkeypatch, no_proxy):
    async with ForwardProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", no_proxy)
        await _read_small_and_big(_url(origin, "https"), _options(origin))
    assert proxy.log and all(e["method"] == "CONNECT" for e in proxy.log)


@pytest.mark.parametrize(("scheme", "http2"), [("http", False), ("https", False), ("https", True)])
async def test_a_dead_proxy_is_a_source_error_and_no_direct_connection(origin, monkeypatch, scheme, http2):
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("HTTP_PROXY", f"http://reader:s3cret@{dead}")
    monkeypatch.setenv("HTTPS_PROXY", f"http://reader:s3cret@{dead}")
    origin[1].take_log()
    with pytest.raises(SourceError) as raised:
        await HttpSource.open(_url(origin, scheme), options=_options(origin, http2=http2, max_attempts=2))
    message = str(raised.value)
    assert f"proxy http://{dead}" in message and "s3cret" not in message and "reader" not in message
    assert origin[1].take_log() == []  # the origin saw nothing: no silent direct connection


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_proxy_gone_after_open_fails_big_reads_cleanly(origin, monkeypatch, scheme):
    """The parts' own connections go through the proxy too: once it is gone, a big read fails."""
    async with ForwardProxy() as proxy:
        for variable in ("HTTP_PROXY", "HTTPS_PROXY"):
            monkeypatch.setenv(variable, proxy.url)
        source = await HttpSource.open(_url(origin, scheme), options=_options(origin, max_attempts=2))
    try:
        origin[1].take_log()
        with pytest.raises(SourceError, match=f"proxy {proxy.url}"):
            await source.read(*BULK)
        assert origin[1].take_log() == []
    finally:
        await source.close()


@pytest.mark.parametrize(
    ("scheme", "http2"), [("http", False), ("https", False), ("http", True), ("https", True)]
)
async def test_proxy_credentials_become_proxy_authorization(origin, monkeypatch, scheme, http2):
    async with ForwardProxy(credentials=("reader", "s3:cr@t/")) as proxy:
        monkeypatch.setenv("ALL_PROXY", proxy.url_with_credentials)
        await _read_small_and_big(_url(origin, scheme), _options(origin, http2=http2))
    assert proxy.log and all(e["status"] == 200 for e in proxy.log)
    # "reader:s3:cr@t/", percent-decoded from the URL, in Basic
    assert {e["authorization"] for e in proxy.log} == {"Basic cmVhZGVyOnMzOmNyQHQv"}


@pytest.mark.parametrize(("scheme", "http2"), [("http", False), ("https", False), ("https", True)])
async def test_a_proxy_refusing_credentials_is_a_source_error(origin, monkeypatch, scheme, http2):
    async with ForwardProxy(credentials=("reader", "right")) as proxy:
        host_port = proxy.url.split("//")[1]
        monkeypatch.setenv("ALL_PROXY", f"http://reader:wrong@{host_port}")
        with pytest.raises(SourceError, match="407") as raised:
            await HttpSource.open(_url(origin, scheme), options=_options(origin, http2=http2))
    assert "wrong" not in str(raised.value) and f"proxy {proxy.url} refused" in str(raised.value)
    assert len(proxy.log) == 1  # the proxy's answer is final: not retried


async def test_an_unsupported_proxy_scheme_is_a_source_error(origin, monkeypatch):
    monkeypatch.setenv("ALL_PROXY", "socks5://user:pw@127.0.0.1:1080")
    with pytest.raises(SourceError, match="only http:// and https:// proxies") as raised:
        await HttpSource.open(_url(origin, "https"), options=_options(origin))
    assert "pw" not in str(raised.value)


def test_the_tunnel_under_uvloop(origin, monkeypatch):
    """`pt2serve serve` runs on uvloop: its start_tls upgrades the CONNECT tunnel too."""
    import uvloop

    async def through_proxy() -> list[dict]:
        async with ForwardProxy() as proxy:
            monkeypatch.setenv("HTTPS_PROXY", proxy.url)
            await _read_small_and_big(_url(origin, "https"), _options(origin))
        return proxy.log

    log = uvloop.run(through_proxy())
    assert log and sum(e["bytes"] for e in log) > BULK[1] - BULK[0]


@pytest.mark.parametrize(("scheme", "http2"), [("http", False), ("https", False), ("https", True)])
async def test_an_https_proxy_is_reached_over_verified_tls(origin, monkeypatch, scheme, http2):
    ca, _ = origin
    async with ForwardProxy(tls=ca.server_context(), credentials=("reader", "pw")) as proxy:
        monkeypatch.setenv("ALL_PROXY", proxy.url_with_credentials)
        await _read_small_and_big(_url(origin, scheme), _options(origin, http2=http2))
        with pytest.raises(SourceError, match="certificate"):  # the proxy's own certificate is checked
            await HttpSource.open(_url(origin, scheme), options=dataclasses.replace(FAST, http2=http2))
    assert proxy.log and all(e["status"] == 200 for e in proxy.log)
