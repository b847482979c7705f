"""A moto server on loopback that checks SigV4 signatures and IAM policies, for the AWS credential tests.

``MotoServer`` runs ``moto_server`` (``pip install 'moto[server]'``) on a free 127.0.0.1 port with
``INITIAL_NO_AUTH_ACTION_COUNT`` set: the first ``SETUP_ACTIONS`` requests create an admin IAM user,
its access key and its policy unauthenticated; every request after that must be signed with a key
moto issued (an IAM user's, or temporary credentials from its STS) and be allowed by that identity's
policies. A wrong secret is ``SignatureDoesNotMatch``, an unknown key ``InvalidAccessKeyId``, a
missing permission ``AccessDenied``: the tests can fail.

Helpers create users, roles and temporary credentials (signed with the admin key) and upload
objects. The ``moto_s3`` fixture (module scope) starts one server per test module.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from testing.servers import HOST, free_port, stop_process, wait_listening

REGION = "us-east-1"
BUCKET = "models"
SETUP_ACTIONS = 3  # create_user, create_access_key, put_user_policy: then signatures are checked
START_TIMEOUT = 30.0
EVERYTHING = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
READ_OBJECTS = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "*"}],
}
LIST_ONLY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": "*"}],
}
TRUST_ANYONE = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"AWS": "*", "Federated": "*"},
            "Action": ["sts:AssumeRole", "sts:AssumeRoleWithWebIdentity"],
        }
    ],
}


def moto_server_binary() -> str | None:
    found = shutil.which("moto_server")
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), "moto_server")
    return beside if os.path.exists(beside) else None


class MotoServer:
    """One ``moto_server`` with IAM authentication on. ``start()`` / ``stop()``, or ``with``."""

    region = REGION
    bucket = BUCKET

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.endpoint = ""
        self.admin_key: tuple[str, str] = ("", "")

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> MotoServer:
        binary = moto_server_binary()
        if binary is None:
            raise RuntimeError("moto_server is not installed (pip install 'moto[server]')")
        port = free_port()
        self.endpoint = f"http://{HOST}:{port}"
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_ACTIONS)}
        self.proc = subprocess.Popen(
            [binary, "-H", HOST, "-p", str(port)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_listening(port, self.proc, "moto_server", START_TIMEOUT)
            self._create_admin()
            self.client("s3").create_bucket(Bucket=self.bucket)
        except BaseException:
            self.stop()
            raise
        return self

    def _create_admin(self) -> None:
        """The unauthenticated setup actions: after these moto checks every signature."""
        iam = self.client("iam", key=("setup", "setup"))
        iam.create_user(UserName="admin")
        key = iam.create_access_key(UserName="admin")["AccessKey"]
        iam.put_user_policy(UserName="admin", PolicyName="everything", PolicyDocument=json.dumps(EVERYTHING))
        self.admin_key = (key["AccessKeyId"], key["SecretAccessKey"])

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process(proc, grace=0.5)  # no state worth a graceful stop

    # -- clients and identities ----------------------------------------------------------------

    def client(self, service: str, key: tuple[str, ...] | None = None):
        import boto3
        from botocore.config import Config

        access, secret, *token = key or self.admin_key
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=access,
            aws_secret_access_key=secret,
            aws_session_token=token[0] if token else None,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )

    def create_user(self, name: str, policy: dict | None = None) -> tuple[str, str]:
        """A new IAM user with one inline policy; returns its (access key id, secret)."""
        iam = self.client("iam")
        iam.create_user(UserName=name)
        iam.put_user_policy(
            UserName=name, PolicyName="policy", PolicyDocument=json.dumps(policy or READ_OBJECTS)
        )
        return self.add_key(name)

    def add_key(self, user: str) -> tuple[str, str]:
        key = self.client("iam").create_access_key(UserName=user)["AccessKey"]
        return key["AccessKeyId"], key["SecretAccessKey"]

    def delete_key(self, user: str, access_key_id: str) -> None:
        self.client("iam").delete_access_key(UserName=user, AccessKeyId=access_key_id)

    def create_role(self, name: str, policy: dict = READ_OBJECTS) -> str:
        """A new IAM role anyone may assume, with one inline policy; returns its ARN."""
        iam = self.client("iam")
        arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(TRUST_ANYONE))["Role"]["Arn"]
        iam.put_role_policy(RoleName=name, PolicyName="policy", PolicyDocument=json.dumps(policy))
        return arn

    def assume_role(self, role_arn: str, session: str = "pt2serve-test") -> dict[str, str]:
        """Temporary credentials from moto's STS: AccessKeyId, SecretAccessKey, SessionToken, Expiration."""
        answer = self.client("sts").assume_role(RoleArn=role_arn, RoleSessionName=session)["Credentials"]
        expiration = answer["Expiration"]
        if isinstance(expiration, datetime.datetime):
            answer["Expiration"] = expiration.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return answer

    def upload(self, key: str, data: bytes) -> str:
        return self.client("s3").put_object(Bucket=self.bucket, Key=key, Body=data)["ETag"]


@pytest.fixture(scope="module")
def moto_s3():
    """A moto server checking signatures, with the bucket ``models`` created; one per test module."""
    if moto_server_binary() is None:
        pytest.skip("moto_server is not installed: pip install 'moto[server]'")
    if importlib.util.find_spec("boto3") is None:
        pytest.skip("boto3 is not installed (needed to create IAM users and upload test objects)")
    with contextlib.ExitStack() as stack:
        yield stack.enter_context(MotoServer())
