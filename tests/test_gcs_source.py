"""gs:// against a real Cloud Storage emulator (fake-gcs-server on loopback): the same index and bytes
as the local reader, generation pinning, faults, Application Default Credentials whose tokens are
checked where they land (GcsFront: our token endpoint, metadata server and recording proxy), the CLI."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import reader
from app.pull import pull
from reader.sources import HttpOptions
from reader.sources.gcs import GcsPolicy
from testing.checks import run
from testing.cli import cli, console_script, one_line_error
from testing.cli import reader_bytes as _reader_bytes
from testing.compare import same_as_fixture as _same_as_local
from testing.gcs import (
    METADATA_ACCOUNT,
    SERVICE_ACCOUNT,
    FakeGcs,
    GcsFront,
    fake_gcs,  # noqa: F401 - session fixture: fake-gcs-server on loopback
    gcloud_user_file,
    service_account_file,
)
from testing.paths import ARCHIVES
from testing.service import in_process, make_app
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator

BUCKET = "pt2serve-archives"
VERSIONED = "pt2serve-versioned"
NAMES = ["layouts.pt2", "dtypes.pt2", "many_deflate.pt2", "two_models.pt2"]


@pytest.fixture(scope="module")
def gcs(fake_gcs: FakeGcs) -> FakeGcs:  # noqa: F811
    fake_gcs.create_bucket(BUCKET)
    fake_gcs.create_bucket(VERSIONED, versioning=True)
    for name in [*NAMES, "many.pt2"]:
        fake_gcs.upload(BUCKET, f"archives/{name}", ARCHIVES / name)
    return fake_gcs


@pytest.fixture
def emulated(gcs: FakeGcs, monkeypatch) -> FakeGcs:
    """STORAGE_EMULATOR_HOST as Google's clients take it (host:port, no scheme)."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.endpoint.removeprefix("http://"))
    return gcs


@pytest.fixture
def front(gcs: FakeGcs, monkeypatch, tmp_path):
    """The emulator behind GcsFront at PT2SERVE_GCS_ENDPOINT (credentials apply there), with ADC
    confined to this test: no gcloud files, no credentials file unless a test sets one."""
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    with GcsFront(gcs.endpoint) as server:
        monkeypatch.setenv("PT2SERVE_GCS_ENDPOINT", server.url)
        yield server


@pytest.fixture
def service_account(front: GcsFront, monkeypatch, tmp_path) -> GcsFront:
    path, public, _ = service_account_file(tmp_path, front.url + "/token")
    front.public_key_pem = public
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    return front


# -- bytes and requests --------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
async def test_reads_equal_local(emulated: FakeGcs, name: str) -> None:
    location = f"gs://{BUCKET}/archives/{name}"
    async with reader.open_archive(location, tail_size=8192) as ar:
        assert ar.source.location == location
        assert isinstance(ar.source.policy, GcsPolicy)
        await _same_as_local(ar, name)


async def test_shared_linear_archive(emulated: FakeGcs, shared_linear) -> None:
    emulated.upload(BUCKET, "shared/linear.pt2", shared_linear)
    remote_archive = reader.open_archive(f"gs://{BUCKET}/shared/linear.pt2")
    async with remote_archive as remote, reader.open_archive(shared_linear) as local:
        assert remote.models == local.models
        for info in local.tensors():
            want = await local.read(info.name, model=info.model)
            assert await remote.read(info.name, model=info.model) == want


async def test_open_is_two_requests_then_every_read_asks_for_the_opened_generation(front: GcsFront) -> None:
    async with reader.open_archive(f"gs://{BUCKET}/archives/many.pt2") as ar:
        assert ar.stats["open"]["requests"] == 2
        await ar.read(ar.tensors()[100].name)
        assert ar.stats["data"]["requests"] == 1
        generation = ar.source.policy.generation
        assert ar.source.identity == f"generation:{generation}"
    first, *later = front.storage_requests()
    assert first.target == "/download/storage/v1/b/pt2serve-archives/o/archives%2Fmany.pt2?alt=media"
    assert len(later) == 2
    assert all(seen.target == f"{first.target}&generation={generation}" for seen in later)
    assert all(seen.authorization is None for seen in [first, *later])  # ADC found nothing here


async def test_object_replaced_between_reads_raises_source_changed(emulated: FakeGcs) -> None:
    key = "archives/replaced.pt2"
    emulated.upload(BUCKET, key, ARCHIVES / "many.pt2")
    async with reader.open_archive(f"gs://{BUCKET}/{key}", tail_size=8192) as ar:
        assert await ar.revalidate()
        emulated.upload(BUCKET, key, ARCHIVES / "many_deflate.pt2")
        assert not await ar.revalidate()
        with pytest.raises(reader.SourceChanged, match="gone"):
            await ar.read(ar.tensors()[3].name)


async def test_versioned_bucket_keeps_reading_the_opened_generation(emulated: FakeGcs) -> None:
    key = "archives/kept.pt2"
    emulated.upload(VERSIONED, key, ARCHIVES / "layouts.pt2")
    async with reader.open_archive(f"gs://{VERSIONED}/{key}", tail_size=4096) as ar:
        emulated.upload(VERSIONED, key, ARCHIVES / "dtypes.pt2")
        assert not await ar.revalidate()  # the live object moved on ...
        await _same_as_local(ar, "layouts.pt2")  # ... and every read still gets the opened bytes


async def test_served_by_the_service_with_a_version_from_the_generation(emulated: FakeGcs, tmp_path) -> None:
    key = "archives/served.pt2"
    emulated.upload(BUCKET, key, ARCHIVES / "layouts.pt2")
    specs = [f"local={ARCHIVES / 'layouts.pt2'}", f"remote=gs://{BUCKET}/{key}"]
    async with in_process(make_app(specs)) as client:
        local = await client.get("/archives/local/tensors/conv.weight/data")
        remote = await client.get("/archives/remote/tensors/conv.weight/data")
        assert remote.status_code == 200 and remote.content == local.content
        version = (await client.get("/archives/remote/manifest")).json()["version"]
    async with in_process(make_app(specs)) as client:  # another replica, or a restart: the same name
        assert (await client.get("/archives/remote/manifest")).json()["version"] == version
    emulated.upload(BUCKET, key, ARCHIVES / "layouts.pt2")  # the same bytes, a new generation
    async with in_process(make_app(specs)) as client:
        new_version = (await client.get("/archives/remote/manifest")).json()["version"]
        assert new_version != version
    report = await pull(f"gs://{BUCKET}/{key}", tmp_path / "mirror")  # `pt2serve pull` straight from gs://
    assert report.fetched == report.tensors > 0 and report.version == new_version


# -- faults --------------------------------------------------------------------------------------


async def test_cut_body_resumes_from_the_next_byte(front: GcsFront) -> None:
    async with reader.open_archive(f"gs://{BUCKET}/archives/many.pt2", tail_size=8192) as ar:
        info = max(ar.tensors(), key=lambda t: t.nbytes)
        async with reader.open_archive(ARCHIVES / "many.pt2") as local:
            want = await local.read(info.name)
        front.plan.cuts.append(100)
        assert await ar.read(info.name) == want
    cut, resumed = front.storage_requests()[-2:]
    assert "&generation=" in resumed.target
    assert cut.status == 206 and resumed.status == 206


async def test_5xx_is_retried(front: GcsFront) -> None:
    front.plan.statuses += [503, 500]
    async with reader.open_archive(f"gs://{BUCKET}/archives/two_models.pt2") as ar:
        assert ar.models == ["decoder", "encoder"]
    assert [seen.status for seen in front.storage_requests()][:3] == [503, 500, 206]


async def test_missing_object_and_refusal_name_the_credentials(front: GcsFront) -> None:
    with pytest.raises(
        reader.SourceError, match=r"HTTP 404 .*credentials: no credentials .*tried"
    ) as missing:
        await reader.open_archive(f"gs://{BUCKET}/archives/absent.pt2")
    assert not isinstance(missing.value, reader.SourceChanged)
    front.plan.statuses.append(403)
    with pytest.raises(reader.SourceError, match=r"HTTP 403 \(access denied\); credentials: no credentials"):
        await reader.open_archive(f"gs://{BUCKET}/archives/layouts.pt2")


# -- credentials ---------------------------------------------------------------------------------


async def test_service_account_token_reaches_storage_and_is_refreshed(service_account: GcsFront) -> None:
    front = service_account
    async with reader.open_archive(f"gs://{BUCKET}/archives/layouts.pt2", tail_size=4096) as ar:
        names = [t.name for t in ar.tensors() if t.readable]
        await ar.read(names[0])
        assert front.tokens == ["ya29.test-1"]
        claims = front.grants[0]  # the JWT grant was signed by the key file's key (checked by the front)
        assert claims["iss"] == SERVICE_ACCOUNT
        assert claims["scope"] == "https://www.googleapis.com/auth/devstorage.read_only"
        # time passes: the token nears its expiry, and the next read refreshes it first
        credentials = ar.source.client.auth.credentials
        credentials.expiry = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
        await ar.read(names[1])
        assert front.tokens == ["ya29.test-1", "ya29.test-2"]
        # a token the server refuses (revoked): refreshed once, the request sent again
        front.plan.statuses.append(401)
        await ar.read(names[2])
        assert front.tokens[-1] == "ya29.test-3"
    seen = [s.authorization for s in front.storage_requests()]
    assert seen == ["Bearer ya29.test-1"] * 3 + [
        "Bearer ya29.test-2",
        "Bearer ya29.test-2",
        "Bearer ya29.test-3",
    ]


async def test_gcloud_user_credentials_with_a_quota_project(front: GcsFront, tmp_path) -> None:
    path = gcloud_user_file(tmp_path / "gcloud", "ya29.user", account="someone@example.com",
                            quota_project_id="billing-project")  # fmt: skip
    async with reader.open_archive(f"gs://{BUCKET}/archives/layouts.pt2", tail_size=4096) as ar:
        await ar.read(ar.tensors()[0].name)
    seen = front.storage_requests()
    assert {(s.authorization, s.user_project) for s in seen} == {("Bearer ya29.user", "billing-project")}
    front.plan.statuses.append(403)
    with pytest.raises(reader.SourceError) as refused:
        await reader.open_archive(f"gs://{BUCKET}/archives/layouts.pt2")
    assert f"credentials: user credentials of someone@example.com from {path}" in str(refused.value)
    assert "ya29." not in str(refused.value) and "not-a-real" not in str(refused.value)


async def test_parallel_parts_share_one_refresh_and_the_generation(
    service_account: GcsFront, gcs: FakeGcs, tmp_path
) -> None:
    front = service_account
    big = np.arange(64 << 10, dtype=np.float32)  # 256 KiB: 16 parts of 16 KiB
    write_pt2(tmp_path / "big.pt2", {"big": (7, [big.size], big.tobytes())})
    gcs.upload(BUCKET, "archives/big.pt2", tmp_path / "big.pt2")
    options = HttpOptions(parallel_parts=4, part_size=16 << 10, parallel_above=32 << 10, fast_connection=None)
    async with reader.open_archive(
        f"gs://{BUCKET}/archives/big.pt2", tail_size=4096, http_options=options
    ) as ar:
        before = len(front.storage_requests())
        ar.source.client.auth.credentials.expiry = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
        assert b"".join([bytes(c) async for c in ar.tensor("big").chunks()]) == big.tobytes()
        generation = ar.source.policy.generation
    parts = front.storage_requests()[before:]
    assert len(parts) >= 16 and all(s.target.endswith(f"&generation={generation}") for s in parts)
    assert front.tokens == ["ya29.test-1", "ya29.test-2"]  # the parts in flight waited for one refresh
    assert {s.authorization for s in parts} == {"Bearer ya29.test-2"}


async def test_refusal_names_the_service_account_never_a_secret(service_account: GcsFront, tmp_path) -> None:
    service_account.plan.statuses.append(403)
    with pytest.raises(reader.SourceError) as refused:
        await reader.open_archive(f"gs://{BUCKET}/archives/layouts.pt2")
    message = str(refused.value)
    assert (
        "HTTP 403" in message and SERVICE_ACCOUNT in message and "GOOGLE_APPLICATION_CREDENTIALS" in message
    )
    private_key = json.loads((tmp_path / "service-account.json").read_text())["private_key"]
    assert "PRIVATE KEY" not in message and private_key[100:140] not in message
    assert "ya29." not in message


async def test_unusable_credentials_file_is_a_clear_error(front: GcsFront, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))
    with pytest.raises(reader.SourceError, match=r"GOOGLE_APPLICATION_CREDENTIALS=.*absent\.json"):
        await reader.open_archive(f"gs://{BUCKET}/archives/layouts.pt2")
    assert front.seen == []


async def test_a_token_endpoint_refusal_says_so(service_account: GcsFront, tmp_path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    service_account.public_key_pem = service_account_file(other, "unused")[1]  # not the file's key
    with pytest.raises(
        reader.SourceError, match=f"refreshing the token of service account {SERVICE_ACCOUNT}"
    ):
        await reader.open_archive(f"gs://{BUCKET}/archives/layouts.pt2")
    assert service_account.storage_requests() == []


# -- bad locations -------------------------------------------------------------------------------


# -- the CLI, in subprocesses --------------------------------------------------------------------


def test_cli_ls_and_get_against_the_emulator(gcs: FakeGcs, tmp_path) -> None:
    env = {"STORAGE_EMULATOR_HOST": gcs.endpoint}
    uri = f"gs://{BUCKET}/archives/layouts.pt2"
    listed = cli("ls", uri, "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "conv.weight" in {t["name"] for t in json.loads(listed.stdout)["tensors"]}
    out = tmp_path / "conv.bin"
    got = cli("get", uri, "conv.weight", "-o", out, env=env)
    assert got.returncode == 0, got.stderr
    assert out.read_bytes() == run(_reader_bytes(ARCHIVES / "layouts.pt2", "conv.weight"))
    malformed = cli("ls", "gs://Bucket", env=env)
    assert malformed.returncode == 2
    one_line_error(malformed.stderr, "pt2serve ls: error: 'gs://Bucket' is not a gs://bucket/object location")


def test_cli_takes_credentials_from_the_metadata_server(gcs: FakeGcs, tmp_path) -> None:
    """ADC on GCE/GKE: no key file, the metadata server (ours, at GCE_METADATA_HOST) hands out tokens."""
    unset = ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")
    base = {k: v for k, v in os.environ.items() if k not in unset}
    with GcsFront(gcs.endpoint) as front:
        metadata = {"GCE_METADATA_HOST": front.address, "GCE_METADATA_IP": front.address}
        env = {**base, **metadata, "PT2SERVE_GCS_ENDPOINT": front.url, "HOME": str(tmp_path),
               "CLOUDSDK_CONFIG": str(tmp_path)}  # fmt: skip
        command = [*console_script(), "ls", f"gs://{BUCKET}/archives/layouts.pt2"]
        listed = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
        assert listed.returncode == 0, listed.stderr
        assert "conv.weight" in listed.stdout
        assert front.tokens == ["ya29.test-1"]
        assert {s.authorization for s in front.storage_requests()} == {"Bearer ya29.test-1"}
        front.plan.statuses.append(403)
        refused = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
        assert refused.returncode == 1
        one_line_error(refused.stderr, "pt2serve: SourceError:")
        assert f"credentials: the metadata server's service account ({METADATA_ACCOUNT})" in refused.stderr


def test_cli_with_gcloud_user_credentials_prints_no_warning(gcs: FakeGcs, tmp_path) -> None:
    """google-auth warns about gcloud's credentials without a quota project (a multi-line UserWarning
    that matters to APIs that bill a project, not to reading objects): the CLI keeps stderr clean."""
    gcloud_user_file(tmp_path / "gcloud", "ya29.user")
    unset = ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")
    base = {k: v for k, v in os.environ.items() if k not in unset}
    with GcsFront(gcs.endpoint) as front:
        env = {**base, "PT2SERVE_GCS_ENDPOINT": front.url, "HOME": str(tmp_path),
               "CLOUDSDK_CONFIG": str(tmp_path / "gcloud")}  # fmt: skip
        command = [*console_script(), "ls", f"gs://{BUCKET}/archives/layouts.pt2"]
        listed = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
        assert listed.returncode == 0 and listed.stderr == "", listed.stderr
        assert {s.authorization for s in front.storage_requests()} == {"Bearer ya29.user"}


def test_without_google_auth_the_error_says_what_to_install(gcs: FakeGcs) -> None:
    """google-auth absent (its import blocked in a fresh interpreter): one line naming the extra; the
    emulator needs no credentials, so no google-auth either."""
    code = f"""if True:
        import asyncio, os, sys, reader
        sys.modules["google.auth"] = None
        async def open_and_close(location):
            await (await reader.open_archive(location)).close()
        try:
            asyncio.run(open_and_close("gs://some-bucket/model.pt2"))
        except reader.SourceError as exc:
            print(exc)
        os.environ["STORAGE_EMULATOR_HOST"] = "{gcs.endpoint}"
        asyncio.run(open_and_close("gs://{BUCKET}/archives/layouts.pt2"))
        print("opened from the emulator")
    """
    unset = ("STORAGE_EMULATOR_HOST", "PT2SERVE_GCS_ENDPOINT")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.stdout.splitlines() == [
        "gs:// reads need google-auth for Application Default Credentials: pip install 'pt2serve[gcs]'",
        "opened from the emulator",
    ], done.stderr


async def test_the_scheme_is_read_in_any_case(emulated: FakeGcs) -> None:
    async with reader.open_archive(f"Gs://{BUCKET}/archives/two_models.pt2", tail_size=8192) as ar:
        assert isinstance(ar.source.policy, GcsPolicy)
        await _same_as_local(ar, "two_models.pt2")
