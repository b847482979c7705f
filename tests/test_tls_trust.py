"""Which https servers remote reads trust (reader/sources/transport/tls.py), against nginx with a
certificate of a private CA that `trustme` issues: refused by default with a SourceError that names the
host and says
"certificate"; trusted through SSL_CERT_FILE, SSL_CERT_DIR (the `openssl rehash` layout) or the extra
bundle (HttpOptions.ca_bundle, PT2SERVE_CA_BUNDLE, --ca-bundle), on both transports (http1/ and
HTTP/2), small reads and big ranges, in the library, the service's registry and the CLI."""

from __future__ import annotations

import dataclasses
import random

import httpx
import pytest

import reader
from app.registry import Registry
from app.settings import Settings
from reader.errors import SourceError
from reader.sources import HttpOptions, HttpSource
from reader.sources.http import make_client
from reader.sources.transport.tls import untrusted_certificate, verified_context
from testing.cli import acli, one_line_error
from testing.forward_proxy import ForwardProxy
from testing.paths import ARCHIVES
from testing.private_ca import https_origin

pytestmark = pytest.mark.emulator

DATA = random.Random(4).randbytes(3 << 20)
ARCHIVE = "layouts.pt2"
FAST = HttpOptions(backoff_base=0.01, backoff_cap=0.05, read_timeout=5.0, time_budget=30.0)


@pytest.fixture(scope="module")
def origin(tmp_path_factory):
    files = {"blob.bin": DATA, ARCHIVE: (ARCHIVES / ARCHIVE).read_bytes()}
    with https_origin(tmp_path_factory.mktemp("tls"), files) as (ca, server):
        yield ca, server


@pytest.fixture(autouse=True)
def default_trust(monkeypatch):
    """Only the trust a test gives: none of the machine's own settings, no proxy."""
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "PT2SERVE_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def _blob(origin) -> str:
    return origin[1].tls_base_url + "/blob.bin"


async def _read_every_path(url: str, options: HttpOptions) -> None:
    source = await HttpSource.open(url, options=options)
    try:
        assert await source.read(10, 5000) == DATA[10:5000]
        assert await source.read(1 << 20, 3 << 20) == DATA[1 << 20 : 3 << 20]  # in parts
    finally:
        await source.close()


@pytest.mark.parametrize("http2", [False, True])
async def test_a_private_ca_is_refused_with_a_clear_source_error(origin, http2):
    origin[1].take_log()
    with pytest.raises(SourceError) as raised:
        await HttpSource.open(_blob(origin), options=dataclasses.replace(FAST, http2=http2))
    message = str(raised.value)
    assert "certificate of 127.0.0.1 not trusted" in message and "SSL_CERT_FILE" in message
    assert origin[1].take_log() == []  # no request was sent over the untrusted connection


async def test_the_client_refuses_it_too(origin):
    """The transport's own connections verify with the same context, and their failure is recognised."""
    async with make_client(FAST) as client:
        with pytest.raises(httpx.ConnectError) as raised:
            await client.get(_blob(origin), headers={"Range": f"bytes=0-{(2 << 20) - 1}"})
    assert untrusted_certificate(raised.value) is not None


async def test_archives_over_an_untrusted_connection_fail_as_source_errors(origin):
    with pytest.raises(reader.SourceError, match="certificate"):
        async with reader.open_archive(origin[1].tls_base_url + "/" + ARCHIVE):
            pass


@pytest.mark.parametrize("trust", ["SSL_CERT_FILE", "SSL_CERT_DIR", "ca_bundle file", "ca_bundle directory"])
@pytest.mark.parametrize("http2", [False, True])
async def test_a_trusted_private_ca_reads_exact_bytes_on_every_path(origin, monkeypatch, trust, http2):
    ca, _ = origin
    options = dataclasses.replace(FAST, http2=http2)
    if trust == "SSL_CERT_FILE":
        monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca_file))
    elif trust == "SSL_CERT_DIR":
        monkeypatch.setenv("SSL_CERT_DIR", str(ca.ca_dir))
    else:
        bundle = ca.ca_file if trust == "ca_bundle file" else ca.ca_dir
        options = dataclasses.replace(options, ca_bundle=str(bundle))
    await _read_every_path(_blob(origin), options)


async def test_a_missing_ca_bundle_is_a_source_error(origin, tmp_path, monkeypatch):
    missing = tmp_path / "nowhere.pem"
    with pytest.raises(SourceError, match=r"the CA bundle .*nowhere\.pem"):
        await HttpSource.open(_blob(origin), options=dataclasses.replace(FAST, ca_bundle=str(missing)))
    monkeypatch.setenv("SSL_CERT_FILE", str(missing))
    with pytest.raises(SourceError, match=r"SSL_CERT_FILE .*nowhere\.pem"):
        await HttpSource.open(_blob(origin), options=FAST)


def test_one_context_per_configuration(origin, monkeypatch):
    ca, _ = origin
    default = verified_context()
    assert verified_context() is default  # built once (~30 ms), then shared
    assert verified_context(http2=True) is not default  # httpcore sets ALPN on its own
    assert verified_context(str(ca.ca_file)) is verified_context(str(ca.ca_file)) is not default
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca_file))
    assert verified_context() is not default  # the environment is part of the configuration
    assert default.verify_mode.name == "CERT_REQUIRED" and default.check_hostname


async def test_through_a_proxy_the_origin_certificate_is_still_verified(origin, monkeypatch):
    async with ForwardProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        with pytest.raises(SourceError, match=r"certificate of 127\.0\.0\.1 not trusted"):
            await HttpSource.open(_blob(origin), options=FAST)
        assert len(proxy.log) == 1  # one connection: a refused certificate is not retried
        await _read_every_path(_blob(origin), dataclasses.replace(FAST, ca_bundle=str(origin[0].ca_file)))
    assert proxy.log and all(e["method"] == "CONNECT" for e in proxy.log)


async def test_the_service_takes_the_bundle_from_pt2serve_ca_bundle(origin):
    ca, server = origin
    url = server.tls_base_url + "/" + ARCHIVE
    for environ, opens in (({}, False), ({"PT2SERVE_CA_BUNDLE": str(ca.ca_file)}, True)):
        settings = Settings.from_environment(
            [f"m={url}"], environ={**environ, "PT2SERVE_UPSTREAM_ATTEMPTS": "1"}
        )
        registry = Registry(dataclasses.replace(settings, revalidate_seconds=0))
        await registry.start()
        try:
            slot = registry.slot("m")
            assert (slot.archive is not None) is opens, slot.error
            if not opens:
                assert "certificate" in str(slot.error)
        finally:
            await registry.close()


async def test_cli_ls_and_get_over_https_with_a_private_ca(origin, tmp_path):
    ca, server = origin
    url = server.tls_base_url + "/" + ARCHIVE
    async with reader.open_archive(ARCHIVES / ARCHIVE) as local:
        name = local.tensors()[0].name
        expected = await local.read(name)

    status, out, err = await acli("ls", url)
    assert status == 1
    one_line_error(err, "pt2serve: SourceError:")
    assert "certificate of 127.0.0.1 not trusted" in err

    status, out, err = await acli("ls", url, "--ca-bundle", ca.ca_file)
    assert status == 0, err
    assert name in out

    for how, env, extra in (
        ("--ca-bundle", {}, ["--ca-bundle", str(ca.ca_file)]),
        ("PT2SERVE_CA_BUNDLE", {"PT2SERVE_CA_BUNDLE": str(ca.ca_file)}, []),
        ("SSL_CERT_DIR", {"SSL_CERT_DIR": str(ca.ca_dir)}, []),
    ):
        output = tmp_path / f"{how}.bin"
        status, out, err = await acli("get", url, name, "-o", output, *extra, env=env)
        assert status == 0, (how, err)
        assert output.read_bytes() == expected, how


async def test_an_https_scheme_in_capitals_is_read_alike(origin):
    ca, server = origin
    url = "HTTPS://" + server.tls_base_url.partition("://")[2] + "/" + ARCHIVE
    options = dataclasses.replace(FAST, ca_bundle=str(ca.ca_file))
    async with (
        reader.open_archive(url, http_options=options) as remote,
        reader.open_archive(ARCHIVES / ARCHIVE) as local,
    ):
        assert remote.source.local is False
        for info in local.tensors():
            assert await remote.read(info.name) == await local.read(info.name)
