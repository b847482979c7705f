"""az://container/blob and plain blob URLs against Azurite on loopback (which checks shared-key and
SAS signatures): the same index and bytes as the local reader with every credential form, refused
and expired signatures, ETag pinning, the open's requests, faults through the FaultServer, the CLI
(locations and credentials without Azurite: test_azure_locations.py)."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

import reader
from reader.sources import HttpOptions
from reader.sources import azure as azure_source
from reader.sources.azure import TOKEN_REFRESH_BEFORE, AzureSettings, open_azure
from testing.azurite import ACCOUNT, ACCOUNT_KEY, Azurite
from testing.compare import assert_same_as_local
from testing.faultserver import DropAfter, FaultServer, Status
from testing.paths import ARCHIVES, SHARED_LINEAR
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator

NAMES = ["layouts.pt2", "dtypes.pt2", "many.pt2", "many_deflate.pt2", "two_models.pt2"]
CONTAINER = "models"
NAME = "conv.weight"  # a tensor of layouts.pt2, for the CLI
AZURE_ENV = (
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "PT2SERVE_AZURE_BLOB_ENDPOINT",
)


@pytest.fixture(scope="module")
def azurite():
    with Azurite() as server:
        for name in NAMES:
            server.upload(CONTAINER, f"archives/{name}", (ARCHIVES / name).read_bytes())
        if SHARED_LINEAR.exists():
            server.upload(CONTAINER, "shared/linear model.pt2", SHARED_LINEAR.read_bytes())
        yield server


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch) -> None:
    for name in AZURE_ENV:
        monkeypatch.delenv(name, raising=False)


async def _same_as_local(remote: reader.Archive, local_path: pathlib.Path) -> None:
    await assert_same_as_local(remote, local_path, most=12)  # about a dozen: each read is a request


@pytest.mark.parametrize("name", NAMES)
async def test_connection_string_reads_equal_local(azurite: Azurite, name: str, monkeypatch) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    location = f"az://{CONTAINER}/archives/{name}"
    async with reader.open_archive(location, tail_size=8192) as ar:
        assert ar.source.location == location
        await _same_as_local(ar, ARCHIVES / name)


async def test_account_key_from_the_environment_reads_the_shared_archive(
    azurite: Azurite, shared_linear: pathlib.Path, monkeypatch
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", ACCOUNT_KEY)
    monkeypatch.setenv("PT2SERVE_AZURE_BLOB_ENDPOINT", azurite.endpoint)
    async with reader.open_archive(f"az://{CONTAINER}/shared/linear model.pt2") as ar:
        await _same_as_local(ar, shared_linear)


async def test_sas_token_from_the_environment(azurite: Azurite, monkeypatch) -> None:
    blob = "archives/two_models.pt2"
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", "?" + azurite.sas(CONTAINER, blob))
    monkeypatch.setenv("PT2SERVE_AZURE_BLOB_ENDPOINT", azurite.endpoint)
    async with reader.open_archive(f"az://{CONTAINER}/{blob}") as ar:
        await _same_as_local(ar, ARCHIVES / "two_models.pt2")


async def test_development_storage_and_connection_string_sas(azurite: Azurite, monkeypatch) -> None:
    proxy = azurite.endpoint.rsplit("/", 1)[0]
    monkeypatch.setenv(
        "AZURE_STORAGE_CONNECTION_STRING", f"UseDevelopmentStorage=true;DevelopmentStorageProxyUri={proxy}"
    )
    async with reader.open_archive(f"az://{CONTAINER}/archives/dtypes.pt2") as ar:
        await _same_as_local(ar, ARCHIVES / "dtypes.pt2")
    sas = azurite.sas(CONTAINER, "archives/layouts.pt2")
    monkeypatch.setenv(
        "AZURE_STORAGE_CONNECTION_STRING", f"BlobEndpoint={azurite.endpoint};SharedAccessSignature={sas}"
    )
    async with reader.open_archive(f"az://{CONTAINER}/archives/layouts.pt2") as ar:
        await _same_as_local(ar, ARCHIVES / "layouts.pt2")


async def test_a_wrong_key_and_an_expired_sas_are_refused_without_secrets(azurite: Azurite) -> None:
    location = f"az://{CONTAINER}/archives/layouts.pt2"
    wrong_key = "A" * 8 + ACCOUNT_KEY[8:]
    settings = AzureSettings(ACCOUNT, azurite.endpoint, account_key=wrong_key, source="a test")
    with pytest.raises(reader.SourceError) as refused:
        await open_azure(location, tail_size=4096, options=None, settings=settings)
    message = str(refused.value)
    assert "HTTP 403" in message and f"refused the shared key of account '{ACCOUNT}'" in message
    assert wrong_key not in message and "sig=" not in message
    # the right key through the same path works, so the refusal above is Azurite checking the signature
    settings = AzureSettings(ACCOUNT, azurite.endpoint, account_key=ACCOUNT_KEY, source="a test")
    await (await open_azure(location, tail_size=4096, options=None, settings=settings)).close()

    expired = azurite.sas(CONTAINER, "archives/layouts.pt2", expires_in=-60)
    settings = AzureSettings(ACCOUNT, azurite.endpoint, sas_token=expired, source="AZURE_STORAGE_SAS_TOKEN")
    with pytest.raises(reader.SourceError, match="refused the SAS token from AZURE_STORAGE_SAS_TOKEN") as sas:
        await open_azure(location, tail_size=4096, options=None, settings=settings)
    assert "expired" in str(sas.value) and expired.split("sig=")[1] not in str(sas.value)


async def test_a_generated_sas_is_renewed_before_it_expires(azurite: Azurite, monkeypatch) -> None:
    """With a 3-second SAS renewed 2 seconds ahead, a read 3.5 s after the open only works if the
    source signed a new one (Azurite refuses an expired SAS, as the test above shows)."""
    monkeypatch.setattr(azure_source, "SAS_LIFETIME", 3.0)
    monkeypatch.setattr(azure_source, "SAS_RENEW_BEFORE", 2.0)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    async with reader.open_archive(f"az://{CONTAINER}/archives/many.pt2", tail_size=4096) as ar:
        await asyncio.sleep(3.5)
        await _same_as_local(ar, ARCHIVES / "many.pt2")


async def test_the_open_is_a_head_and_the_tail_and_a_tensor_one_more_request(
    azurite: Azurite, monkeypatch
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    async with reader.open_archive(f"az://{CONTAINER}/archives/dtypes.pt2") as ar:
        assert ar.stats["open"]["requests"] == 2  # HEAD, then the tail (which holds the whole archive)
        assert "data" not in ar.stats
    async with reader.open_archive(f"az://{CONTAINER}/archives/many.pt2") as ar:
        assert ar.stats["open"]["requests"] == 3  # HEAD, the tail, the configs before it
        await ar.read(ar.tensors()[100].name)
        assert ar.stats["data"]["requests"] == 1


async def test_a_blob_replaced_between_reads_is_source_changed(azurite: Azurite, monkeypatch) -> None:
    blob = "archives/replaced.pt2"
    azurite.upload(CONTAINER, blob, (ARCHIVES / "many.pt2").read_bytes())
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    async with reader.open_archive(f"az://{CONTAINER}/{blob}", tail_size=8192) as ar:
        assert await ar.revalidate()
        azurite.upload(CONTAINER, blob, (ARCHIVES / "many_deflate.pt2").read_bytes())
        assert not await ar.revalidate()
        with pytest.raises(reader.SourceChanged, match="412"):
            await ar.read(ar.tensors()[3].name)


async def test_plain_blob_urls_with_a_sas(azurite: Azurite) -> None:
    blob = "archives/many_deflate.pt2"
    sas = azurite.sas(CONTAINER, blob)
    async with reader.open_archive(f"{azurite.blob_url(CONTAINER, blob)}?{sas}", tail_size=4096) as ar:
        assert "sig=" not in ar.source.location and ar.source.location == azurite.blob_url(CONTAINER, blob)
        await _same_as_local(ar, ARCHIVES / "many_deflate.pt2")
    with pytest.raises(reader.SourceError, match=r"HTTP 403 .*refused the SAS in the URL"):
        await reader.open_archive(f"{azurite.blob_url(CONTAINER, blob)}?{sas.replace('sp=r', 'sp=rw')}")


async def test_a_missing_blob_names_the_service_error(azurite: Azurite, monkeypatch) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    with pytest.raises(reader.SourceError, match=r"HTTP 404 \(BlobNotFound\): no such blob or container"):
        await reader.open_archive(f"az://{CONTAINER}/archives/absent.pt2")
    with pytest.raises(reader.SourceError, match=r"HTTP 404 \(ContainerNotFound\)"):
        await reader.open_archive("az://absent-container/archives/layouts.pt2")


async def test_retries_and_resume_through_the_fault_server(monkeypatch) -> None:
    """Azurite injects no faults: the FaultServer stands in for the blob endpoint (same path and
    signing), answering 503s and a cut body, which the az:// source retries and resumes."""
    data = (ARCHIVES / "many.pt2").read_bytes()
    path = f"/{ACCOUNT}/{CONTAINER}/archives/many.pt2"
    async with FaultServer() as server:
        stored = server.put(path, data)
        endpoint = server.url(f"/{ACCOUNT}")
        connection = f"AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={endpoint}"
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", connection)
        cut_body = DropAfter(nbytes=1000, times=1, method="GET", after=1)  # a data read, after the tail
        server.faults += [Status(503, times=2, method="HEAD"), cut_body]
        location = f"az://{CONTAINER}/archives/many.pt2"
        async with (
            reader.open_archive(location, tail_size=8192) as ar,
            reader.open_archive(ARCHIVES / "many.pt2") as local,
        ):
            for info in local.tensors()[::40]:
                assert await ar.read(info.name) == await local.read(info.name)
        assert [fault.applied for fault in server.faults] == [2, 1]
        assert server.errors == []
        for record in server.log:
            assert record.headers["x-ms-version"] and "sig=" in record.target and "sp=r" in record.target
            if record.method == "GET":
                assert record.headers["if-match"] == stored.etag


async def _local_bytes(path: pathlib.Path, name: str) -> bytes:
    async with reader.open_archive(path) as local:
        return await local.read(name)


def test_cli_ls_get_and_a_usage_error(azurite: Azurite) -> None:
    env = {**os.environ, "AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string}
    script = pathlib.Path(sys.executable).parent / "pt2serve"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "app"]
    listed = subprocess.run([*command, "ls", f"az://{CONTAINER}/archives/two_models.pt2"],
                            capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert "decoder" in listed.stdout and "encoder" in listed.stdout
    got = subprocess.run([*command, "get", f"az://{CONTAINER}/archives/layouts.pt2", NAME, "-o", "-"],
                         capture_output=True, timeout=120, env=env)  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert got.stdout == asyncio.run(_local_bytes(ARCHIVES / "layouts.pt2", NAME))
    bad = subprocess.run([*command, "ls", "az://Not_A_Container/x.pt2"],
                         capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert bad.returncode == 2 and "not an Azure container name" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- Entra ID


@pytest.fixture(scope="module")
def azurite_oauth(tmp_path_factory):
    """Azurite over https (a trustme CA) with `--oauth basic`: bearer tokens accepted when their
    audience, issuer and lifetime fit (it does not check their signature)."""
    import trustme

    folder = tmp_path_factory.mktemp("azurite-tls")
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key, ca_file = folder / "cert.pem", folder / "key.pem", folder / "ca.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_file))
    with Azurite(tls=(cert, key), oauth=True) as server:
        server.ca_file = str(ca_file)
        server.upload(CONTAINER, "archives/two_models.pt2", (ARCHIVES / "two_models.pt2").read_bytes())
        yield server


def _token_answer(expires_on: float, subject: str) -> Status:
    """What an App Service managed-identity endpoint answers once: a JWT for Storage and its expiry."""
    import jwt

    now = int(time.time())
    claims = {"aud": "https://storage.azure.com", "iss": "https://sts.windows.net/pt2serve-test-tenant/",
              "iat": now, "nbf": now - 60, "exp": int(expires_on), "sub": subject}  # fmt: skip
    token = jwt.encode(claims, "not checked by azurite, long enough for pyjwt", algorithm="HS256")
    body = {"access_token": token, "expires_on": str(int(expires_on)), "token_type": "Bearer",
            "resource": "https://storage.azure.com"}  # fmt: skip
    return Status(200, times=1, path="/msi/token", headers={"Content-Type": "application/json"},
                  body=json.dumps(body).encode())  # fmt: skip


async def test_entra_id_through_default_azure_credential_with_refresh(
    azurite_oauth: Azurite, monkeypatch
) -> None:
    """DefaultAzureCredential finds an App Service managed identity (IDENTITY_ENDPOINT, served here by
    the FaultServer on this event loop: a token fetch that blocked the loop would never be answered);
    a token about to expire is refreshed before the next request."""
    ca_file = azurite_oauth.ca_file
    assert ca_file is not None
    monkeypatch.setenv("SSL_CERT_FILE", ca_file)  # Azurite's private CA, trusted as users trust one
    async with FaultServer() as identity:
        identity.faults += [
            _token_answer(time.time() + TOKEN_REFRESH_BEFORE + 2, "first"),
            _token_answer(time.time() + 3600, "second"),
        ]
        monkeypatch.setenv("IDENTITY_ENDPOINT", identity.url("/msi/token"))
        monkeypatch.setenv("IDENTITY_HEADER", "pt2serve-test-identity-header")
        monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT)
        monkeypatch.setenv("PT2SERVE_AZURE_BLOB_ENDPOINT", azurite_oauth.endpoint)
        location = f"az://{CONTAINER}/archives/two_models.pt2"
        async with reader.open_archive(location, tail_size=4096) as ar:
            assert ar.models == ["decoder", "encoder"]
            first = [(r.method, r.headers.get("x-identity-header")) for r in identity.log]
            assert first == [("GET", "pt2serve-test-identity-header")]
            await asyncio.sleep(2.5)  # the first token is now within TOKEN_REFRESH_BEFORE of its end
            await _same_as_local(ar, ARCHIVES / "two_models.pt2")
            assert len(identity.log) == 2 and [fault.applied for fault in identity.faults] == [1, 1]
        # without a token the same blob is refused: Azurite checks for one
        with pytest.raises(reader.SourceError, match="HTTP 40"):
            await reader.open_archive(f"{azurite_oauth.blob_url(CONTAINER, 'archives/two_models.pt2')}")


async def test_entra_id_failures_are_clear(monkeypatch) -> None:
    from azure.identity import EnvironmentCredential

    settings = AzureSettings(ACCOUNT, "https://127.0.0.1:9/devstoreaccount1", source="a test")
    with pytest.raises(
        reader.SourceError, match=r"no Azure credential found: tried .*DefaultAzureCredential"
    ):
        await open_azure("az://models/x.pt2", tail_size=4096, options=None, settings=settings,
                         credential=EnvironmentCredential())  # fmt: skip
    settings = AzureSettings(ACCOUNT, "http://127.0.0.1:9/devstoreaccount1", source="a test")
    with pytest.raises(reader.SourceError, match="only sent over https"):
        await open_azure("az://models/x.pt2", tail_size=4096, options=None, settings=settings)


async def test_the_service_serves_an_az_archive(azurite: Azurite, monkeypatch) -> None:
    from testing.service import in_process, make_app

    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    async with in_process(make_app([f"layouts=az://{CONTAINER}/archives/layouts.pt2"])) as client:
        listed = (await client.get("/archives")).json()["archives"][0]
        assert listed["location"] == f"az://{CONTAINER}/archives/layouts.pt2" and listed["status"] == "open"
        data = await client.get(f"/archives/layouts/tensors/{NAME}/data")
        assert data.status_code == 200
        assert data.content == await _local_bytes(ARCHIVES / "layouts.pt2", NAME)


def test_cli_without_a_credential_is_one_line_naming_what_was_tried() -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AZURE_", "IDENTITY_"))}
    env |= {"AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT, "PT2SERVE_AZURE_BLOB_ENDPOINT": "https://127.0.0.1:9/x"}
    script = pathlib.Path(sys.executable).parent / "pt2serve"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "app"]
    done = subprocess.run([*command, "ls", f"az://{CONTAINER}/x.pt2"],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # azure-identity's own warning does not reach stderr
    assert "no Azure credential found" in lines[0] and "EnvironmentCredential" in lines[0]
    assert "ManagedIdentityCredential" in lines[0] and "AZURE_STORAGE_ACCOUNT_KEY" in lines[0]


async def test_parallel_parts_and_the_bulk_path_over_az(azurite: Azurite, tmp_path, monkeypatch) -> None:
    """A 3 MiB tensor in 512 KiB parts, 4 at a time (each part its own signed, pinned request; parts of
    1 MiB and more take the bulk body path), byte-exact; replaced before a read: SourceChanged."""
    payload = os.urandom(3 << 20)
    write_pt2(tmp_path / "big.pt2", {"w": (7, [len(payload) // 4], payload)})
    azurite.upload(CONTAINER, "big.pt2", (tmp_path / "big.pt2").read_bytes())
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    for part_size in (512 << 10, 1 << 20):
        options = HttpOptions(parallel_parts=4, part_size=part_size, parallel_above=0, fast_connection=None)
        async with reader.open_archive(f"az://{CONTAINER}/big.pt2", http_options=options) as ar:
            assert b"".join([bytes(chunk) async for chunk in ar.tensor("w").chunks()]) == payload
            assert ar.stats["data"]["requests"] >= len(payload) // part_size  # parts (+ a local header)
    options = HttpOptions(parallel_parts=4, part_size=512 << 10, parallel_above=0, fast_connection=None)
    async with reader.open_archive(f"az://{CONTAINER}/big.pt2", http_options=options) as ar:
        write_pt2(tmp_path / "big.pt2", {"w": (7, [len(payload) // 4], payload[::-1])})
        azurite.upload(CONTAINER, "big.pt2", (tmp_path / "big.pt2").read_bytes())
        with pytest.raises(reader.SourceChanged):
            await ar.read("w")


async def test_the_scheme_is_read_in_any_case(azurite: Azurite, monkeypatch) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    async with reader.open_archive(f"AZ://{CONTAINER}/archives/two_models.pt2", tail_size=8192) as ar:
        await _same_as_local(ar, ARCHIVES / "two_models.pt2")
