"""s3:// credentials and configuration found as botocore finds them, against servers that check signatures.

SeaweedFS: shared credentials and config files, profiles, region and endpoint from the config file and a
`services` section, AWS_ENDPOINT_URL_S3, AWS_NO_SIGN_REQUEST / --no-sign-request, and what a missing
credential says. A moto server with IAM authentication (testing/moto.py): a container credentials
endpoint, web identity, IMDSv2, SSO and assume-role profiles (testing/aws_endpoints.py serves the
endpoints), credentials that expire under an open archive and under `serve` on uvicorn and are refreshed
off the event loop, and refused keys named in the error without their secret. The FaultServer answers
as S3 does for an expired token or a bucket in another region. What resolves without a server (explicit
S3Settings, broken configuration, addressing) is in test_aws_credentials_rules.py.

Every test starts from an environment without AWS_* variables, empty AWS files and IMDS disabled, so
nothing on the machine running the tests is read."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pathlib
import sys
import time
import uuid

import httpx
import pytest

import reader
from app.cli import main as cli_main
from testing import clean_aws
from testing.aws_endpoints import (
    CONTAINER_PATH,
    IMDS_CREDENTIALS,
    SSO_PATH,
    CredentialEndpoints,
    expiring_in,
)
from testing.faultserver import FaultServer, Status
from testing.moto import LIST_ONLY, MotoServer, moto_s3  # noqa: F401 - module fixture
from testing.paths import ARCHIVES
from testing.seaweed import SeaweedS3
from testing.service import make_app, real_server

aws_env = clean_aws.aws_env  # the fixture: no AWS_* variables, empty files, no instance metadata

pytestmark = pytest.mark.emulator


NAME = "layouts.pt2"


KEY = f"archives/{NAME}"


BIG = "many.pt2"  # 880 KB: tensors beyond the tail read at open, so each read is a request


BIG_KEY = f"archives/{BIG}"


async def _same_as_local(location: str, **open_args: object) -> reader.Archive:
    """Open `location`, check its index and a few tensors against the local archive; returns its stats."""
    async with (
        reader.open_archive(location, **open_args) as remote,
        reader.open_archive(ARCHIVES / NAME) as local,
    ):
        assert [t.to_dict() for t in remote.tensors()] == [t.to_dict() for t in local.tensors()]
        for info in [t for t in local.tensors() if t.readable][:3]:
            assert await remote.read(info.name, model=info.model) == await local.read(
                info.name, model=info.model
            )
        return remote


@pytest.fixture(scope="module")
def weed(seaweed_s3: SeaweedS3) -> SeaweedS3:
    for bucket in (seaweed_s3.private_bucket, seaweed_s3.public_bucket):
        seaweed_s3.upload(bucket, KEY, ARCHIVES / NAME)
    return seaweed_s3


async def test_profile_keys_region_and_endpoint_come_from_the_shared_files(
    weed: SeaweedS3, aws_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (aws_env / "credentials").write_text(
        "[default]\naws_access_key_id = not-a-known-key\naws_secret_access_key = default-secret-value\n"
        f"[reader]\naws_access_key_id = {weed.access_key}\naws_secret_access_key = {weed.secret_key}\n"
    )
    (aws_env / "config").write_text(
        f"[default]\nregion = {weed.region}\nendpoint_url = {weed.endpoint}\n"
        f"[profile reader]\nregion = {weed.region}\nendpoint_url = {weed.endpoint}\n"
    )
    location = f"s3://{weed.private_bucket}/{KEY}"
    monkeypatch.setenv("AWS_PROFILE", "reader")
    remote = await _same_as_local(location)
    assert remote.stats["open"]["requests"] <= 2

    monkeypatch.delenv("AWS_PROFILE")  # the default profile's key is refused, and named
    with pytest.raises(reader.SourceError) as refused:
        await reader.open_archive(location)
    message = str(refused.value)
    assert "HTTP 403" in message and "not-a-known-key" in message
    assert f"shared credentials file {aws_env / 'credentials'}" in message
    assert "default-secret-value" not in message


async def test_services_section_and_endpoint_variables(
    weed: SeaweedS3, aws_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}"
    (aws_env / "config").write_text(
        f"[profile svc]\nregion = {weed.region}\nservices = local\n"
        f"aws_access_key_id = {weed.access_key}\naws_secret_access_key = {weed.secret_key}\n"
        f"[services local]\ns3 =\n  endpoint_url = {weed.endpoint}\n  addressing_style = path\n"
    )
    monkeypatch.setenv("AWS_PROFILE", "svc")
    location = f"s3://{weed.private_bucket}/{KEY}"
    await _same_as_local(location)
    # precedence as botocore documents it: PT2SERVE_S3_ENDPOINT, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL,
    # then the config file (each step below succeeds only if the winner is the live endpoint)
    (aws_env / "config").write_text((aws_env / "config").read_text().replace(weed.endpoint, dead))
    monkeypatch.setenv("AWS_ENDPOINT_URL", weed.endpoint)
    await _same_as_local(location)
    monkeypatch.setenv("AWS_ENDPOINT_URL", dead)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", weed.endpoint)
    await _same_as_local(location)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", dead)
    monkeypatch.setenv("PT2SERVE_S3_ENDPOINT", weed.endpoint)
    await _same_as_local(location)


async def test_no_sign_request_reads_a_public_bucket_with_wrong_keys_around(
    weed: SeaweedS3, aws_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", weed.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "wrong-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-value")
    public = f"s3://{weed.public_bucket}/{KEY}"
    with pytest.raises(reader.SourceError, match="wrong-key-id"):  # signed: refused
        await reader.open_archive(public)
    monkeypatch.setenv("AWS_NO_SIGN_REQUEST", "1")
    await _same_as_local(public)
    with pytest.raises(reader.SourceError) as refused:
        await reader.open_archive(f"s3://{weed.private_bucket}/{KEY}")
    assert "HTTP 403" in str(refused.value) and "AWS_NO_SIGN_REQUEST" in str(refused.value)
    assert "wrong-key-id" not in str(refused.value)

    monkeypatch.delenv("AWS_NO_SIGN_REQUEST")  # the CLI option sets it
    assert await asyncio.to_thread(cli_main, ["ls", public, "--no-sign-request", "--json"]) == 0
    assert '"models"' in capsys.readouterr().out


async def test_missing_credentials_say_which_sources_were_tried(
    weed: SeaweedS3, aws_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", weed.endpoint)
    with pytest.raises(reader.SourceError) as refused:
        await reader.open_archive(f"s3://{weed.private_bucket}/{KEY}")
    message = str(refused.value)
    assert "HTTP 403" in message and "no AWS credentials found" in message
    for source in ("environment", "web identity", f"shared credentials file {aws_env / 'credentials'}",
                   f"config file {aws_env / 'config'}", "container endpoint", "IMDS"):  # fmt: skip
        assert source in message


@pytest.fixture(scope="module")
def moto(moto_s3: MotoServer) -> MotoServer:  # noqa: F811 - the fixture imported above
    moto_s3.upload(KEY, (ARCHIVES / NAME).read_bytes())
    moto_s3.upload(BIG_KEY, (ARCHIVES / BIG).read_bytes())
    return moto_s3


@pytest.fixture
def moto_env(moto: MotoServer, aws_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto.endpoint)
    monkeypatch.setenv("AWS_REGION", moto.region)
    return aws_env


LOCATION = f"s3://{MotoServer.bucket}/{KEY}"


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("token_in", ["file", "variable"])
async def test_container_endpoint(
    moto: MotoServer, moto_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch, token_in: str
) -> None:
    role = moto.create_role(_unique("container"))
    with CredentialEndpoints(lambda _: moto.assume_role(role)) as endpoints:
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", endpoints.container_url)
        if token_in == "file":
            (moto_env / "token").write_text(endpoints.container_token)
            monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(moto_env / "token"))
        else:
            monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", endpoints.container_token)
        remote = await _same_as_local(LOCATION)
        assert remote.stats["open"]["requests"] <= 2
        assert endpoints.count(CONTAINER_PATH) == 1


async def test_web_identity(
    moto: MotoServer, moto_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    role = moto.create_role(_unique("web"))
    with CredentialEndpoints(lambda arn: moto.assume_role(arn)) as endpoints:
        (moto_env / "web-token").write_text(endpoints.web_identity_token)
        monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(moto_env / "web-token"))
        monkeypatch.setenv("AWS_ROLE_ARN", role)
        monkeypatch.setenv("AWS_ROLE_SESSION_NAME", "pt2serve")
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", endpoints.base)
        await _same_as_local(LOCATION)
        assert ("POST", "/") in endpoints.requests

        # a role that may not read: the error names the role and the key, not the secret
        weak = moto.create_role(_unique("weak"), LIST_ONLY)
        monkeypatch.setenv("AWS_ROLE_ARN", weak)
        with pytest.raises(reader.SourceError) as refused:
            await reader.open_archive(LOCATION)
    message = str(refused.value)
    assert "AccessDenied" in message and weak in message and "web identity" in message
    assert "access key id ASIA" in message


async def test_instance_metadata_v2(
    moto: MotoServer, moto_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    role = moto.create_role(_unique("instance"))
    with CredentialEndpoints(lambda _: moto.assume_role(role)) as endpoints:
        monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoints.base + "/")
        await _same_as_local(LOCATION)
    # a session token first, then the role and its credentials (each GET without the token is a 401)
    assert endpoints.requests[0] == ("PUT", "/latest/api/token")
    assert ("GET", IMDS_CREDENTIALS + "pt2serve-instance-role") in endpoints.requests


async def test_assume_role_profile(
    moto: MotoServer, moto_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    may_assume = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": "*"}],
    }
    key_id, secret = moto.create_user(_unique("assumer"), may_assume)
    role = moto.create_role(_unique("reader"))
    (moto_env / "config").write_text(
        f"[profile base]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret}\n"
        f"[profile reader]\nrole_arn = {role}\nsource_profile = base\n"
    )
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto.endpoint)
    monkeypatch.setenv("AWS_PROFILE", "base")  # the user itself may not read
    with pytest.raises(reader.SourceError, match=f"AccessDenied.*{key_id}"):
        await reader.open_archive(LOCATION)
    monkeypatch.setenv("AWS_PROFILE", "reader")
    await _same_as_local(LOCATION)


async def test_sso_profile_through_the_cli(
    moto: MotoServer, moto_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An SSO profile after `aws sso login` (its token cache under ~/.aws/sso/cache). botocore fixes that
    directory when imported, so this runs the CLI in a process of its own, HOME pointing at a temp dir."""
    role = moto.create_role(_unique("sso"))
    start_url = "https://pt2serve.awsapps.example/start"
    with CredentialEndpoints(lambda _: moto.assume_role(role)) as endpoints:
        cache = moto_env / "home" / ".aws" / "sso" / "cache"
        cache.mkdir(parents=True)
        token = {"startUrl": start_url, "region": moto.region, "accessToken": endpoints.sso_token,
                 "expiresAt": expiring_in(3600)}  # fmt: skip
        (cache / f"{hashlib.sha1(start_url.encode()).hexdigest()}.json").write_text(json.dumps(token))
        (moto_env / "config").write_text(
            f"[profile sso]\nsso_start_url = {start_url}\nsso_region = {moto.region}\n"
            "sso_account_id = 123456789012\nsso_role_name = Reader\n"
        )
        env = {**os.environ, "HOME": str(moto_env / "home"), "AWS_PROFILE": "sso",
               "AWS_ENDPOINT_URL_SSO": endpoints.base}  # fmt: skip
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app", "ls", LOCATION, "--json", env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert json.loads(out)["models"] == ["model"]
    assert endpoints.count(SSO_PATH + "?role_name=Reader&account_id=123456789012") == 1


class Rotation:
    """Two keys of one IAM user handed out in turn: key A fresh for VALID seconds after it is fetched
    (botocore refreshes 15 minutes ahead of the expiry), then key B. `expire()` waits until A is due
    and deletes it, so from then on only B signs successfully."""

    VALID = 3.0

    def __init__(self, moto: MotoServer) -> None:
        self.moto = moto
        self.user = _unique("rotating")
        self.first = moto.create_user(self.user)
        self.second = moto.add_key(self.user)
        self.first_fetched: float | None = None

    def issue(self, _role: str | None) -> dict[str, str]:
        if self.first_fetched is None:
            self.first_fetched = time.monotonic()
            key, valid = self.first, 15 * 60 + self.VALID
        else:
            key, valid = self.second, 3600
        return {"AccessKeyId": key[0], "SecretAccessKey": key[1], "Expiration": expiring_in(valid)}

    async def expire(self) -> None:
        assert self.first_fetched is not None
        await asyncio.sleep(max(0.0, self.first_fetched + self.VALID + 1.0 - time.monotonic()))
        await asyncio.to_thread(self.moto.delete_key, self.user, self.first[0])


def _container_endpoint(endpoints: CredentialEndpoints, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", endpoints.container_url)
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", endpoints.container_token)


async def _when_held(endpoints: CredentialEndpoints, pending: asyncio.Future) -> None:
    """Returns once the credentials endpoint holds a request (or `pending` ended without one)."""
    while not endpoints.waiting.is_set() and not pending.done():
        await asyncio.sleep(0.005)


async def test_credentials_refreshed_while_an_archive_stays_open(
    moto: MotoServer, moto_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Key B is fetched in a thread: this event loop itself releases the held fetch."""
    rotation = Rotation(moto)
    with CredentialEndpoints(rotation.issue) as endpoints:
        _container_endpoint(endpoints, monkeypatch)
        big = f"s3://{moto.bucket}/{BIG_KEY}"
        async with reader.open_archive(big) as remote, reader.open_archive(ARCHIVES / BIG) as local:
            names = [t.name for t in local.tensors() if t.readable][:12]
            assert await remote.read(names[0]) == await local.read(names[0])
            assert endpoints.count(CONTAINER_PATH) == 1

            await rotation.expire()
            endpoints.hold()
            reads = asyncio.gather(*(remote.read(name) for name in names[1:]))
            await _when_held(endpoints, reads)
            endpoints.release()
            assert await reads == [await local.read(name) for name in names[1:]]
            assert remote.stats["data"]["requests"] >= len(names)
    assert endpoints.count(CONTAINER_PATH) == 2
    assert endpoints.released_in_time is True


async def test_credentials_refreshed_under_a_running_serve(
    moto: MotoServer, moto_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service on uvicorn: while the refresh waits, the service still answers /healthz; after it,
    key B signs, and no request sees a 403."""
    rotation = Rotation(moto)
    with CredentialEndpoints(rotation.issue) as endpoints:
        _container_endpoint(endpoints, monkeypatch)
        app = make_app([f"big=s3://{moto.bucket}/{BIG_KEY}"], revalidate_seconds=3600)
        async with (
            real_server(app) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as client,
            reader.open_archive(ARCHIVES / BIG) as local,
        ):
            names = [t.name for t in local.tensors() if t.readable][:6]
            first = await client.get(f"/archives/big/tensors/{names[0]}/data")
            assert first.status_code == 200 and first.content == await local.read(names[0])
            assert endpoints.count(CONTAINER_PATH) == 1

            await rotation.expire()
            endpoints.hold()
            pending = asyncio.ensure_future(client.get(f"/archives/big/tensors/{names[1]}/data"))
            await _when_held(endpoints, pending)
            assert (await client.get("/healthz")).status_code == 200  # the service's loop is free
            endpoints.release()
            for name, answer in [(names[1], await pending)] + [
                (name, await client.get(f"/archives/big/tensors/{name}/data")) for name in names[2:]
            ]:
                assert answer.status_code == 200, answer.text
                assert answer.content == await local.read(name)
    assert endpoints.count(CONTAINER_PATH) == 2
    assert endpoints.released_in_time is True


@pytest.mark.parametrize("case", ["wrong secret", "unknown key", "no permission"])
async def test_a_refused_key_is_named_without_its_secret(
    moto: MotoServer, moto_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    key_id, secret = moto.create_user(_unique("env"), LIST_ONLY if case == "no permission" else None)
    if case == "wrong secret":
        # another first character: "x" + secret[1:] left a secret that began with "x" unchanged
        secret, code = ("y" if secret.startswith("x") else "x") + secret[1:], "SignatureDoesNotMatch"
    elif case == "unknown key":
        key_id, code = "AKIA" + "Z" * 16, "InvalidAccessKeyId"
    else:
        code = "AccessDenied"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    with pytest.raises(reader.SourceError) as refused:
        await reader.open_archive(LOCATION)
    message = str(refused.value)
    assert f"S3 {code}" in message and f"access key id {key_id}" in message and "environment" in message
    assert secret not in message


async def test_the_right_key_reads_and_no_sign_request_is_anonymous(
    moto: MotoServer, moto_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_id, secret = moto.create_user(_unique("env"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    await _same_as_local(LOCATION)
    monkeypatch.setenv("AWS_NO_SIGN_REQUEST", "true")
    with pytest.raises(reader.SourceError, match=r"HTTP 403.*anonymous: AWS_NO_SIGN_REQUEST"):
        await reader.open_archive(LOCATION)


def _s3_error(code: str) -> bytes:
    return f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>as S3 says it</Message></Error>".encode()


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (
            Status(400, body=_s3_error("ExpiredToken")),
            "HTTP 400 (bad request): S3 ExpiredToken: the credentials have expired",
        ),
        (
            Status(
                400,
                headers={"x-amz-bucket-region": "eu-west-1"},
                body=_s3_error("AuthorizationHeaderMalformed"),
            ),
            "the bucket is in eu-west-1, not us-east-1",
        ),
        (
            Status(301, headers={"x-amz-bucket-region": "ap-south-1"}, body=_s3_error("PermanentRedirect")),
            "HTTP 301 (moved): S3 PermanentRedirect",
        ),
        (Status(400, body=_s3_error("InvalidArgument")), "HTTP 400 (unexpected status)"),  # not a refusal
    ],
    ids=["expired token", "another region", "moved", "not a refusal"],
)
async def test_what_s3_says_is_passed_on(
    aws_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch, fault, expected
) -> None:
    """S3's documented error answers, injected: expired credentials, a bucket in another region."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXPIREDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "expired-secret-value")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "expired-session-token")
    async with FaultServer() as server:
        server.put(f"/bucket/{KEY}", (ARCHIVES / NAME).read_bytes())
        server.faults.append(fault)
        monkeypatch.setenv("PT2SERVE_S3_ENDPOINT", server.base_url)
        with pytest.raises(reader.SourceError) as refused:
            await reader.open_archive(f"s3://bucket/{KEY}")
    message = str(refused.value)
    assert expected in message
    assert "expired-secret-value" not in message and "expired-session-token" not in message
    if "unexpected" not in expected:
        assert "access key id AKIAEXPIREDEXAMPLE from the environment" in message


def _closed_port() -> int:
    from testing.servers import free_port

    return free_port()
