"""AWS configuration and credentials for s3://, found by botocore the way boto3 and the AWS CLI find them.

- Credentials: botocore's chain: environment, web identity (IRSA), SSO, the shared credentials and
  config files (AWS_PROFILE, assume-role profiles, credential_process), container endpoints (ECS,
  EKS Pod Identity) and EC2 instance metadata (IMDSv2). Requests are anonymous only when the chain
  finds nothing, or when AWS_NO_SIGN_REQUEST asks for it.
- Region, endpoint and addressing style: AWS_REGION, then what botocore resolves (AWS_DEFAULT_REGION,
  the profile's `region`; AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, `endpoint_url` and `services`
  sections; `s3 = addressing_style`). PT2SERVE_S3_ENDPOINT overrides the endpoint. The object URL is
  the one a botocore S3 client would send, so every rule botocore knows applies.

Resolving can block (files, STS, metadata endpoints): call these functions in a thread.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import botocore
import botocore.session
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import BotoCoreError, ClientError

from ..errors import SourceError
from .transport.options import DEFAULT_REGION

NO_SIGN_REQUEST = "AWS_NO_SIGN_REQUEST"
_TRUE = {"1", "true", "yes", "on"}

# botocore's provider METHOD -> where it looks, for "no credentials found (tried ...)"
_SOURCES = {
    "env": "environment (AWS_ACCESS_KEY_ID)",
    "assume-role-with-web-identity": "web identity (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN)",
    "sso": "SSO",
    "shared-credentials-file": "shared credentials file {credentials_file}",
    "login": "aws login",
    "custom-process": "credential_process",
    "config-file": "config file {config_file}",
    "assume-role": "assume-role profile",
    "ec2-credentials-file": "boto2 /etc/boto.cfg",
    "boto-config": "boto2 config",
    "container-role": "container endpoint (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI / _FULL_URI)",
    "iam-role": "EC2 instance metadata (IMDS)",
}


def no_sign_request(environ: Mapping[str, str] | None = None) -> bool:
    """AWS_NO_SIGN_REQUEST=1 (what `--no-sign-request` sets): send every S3 request unsigned."""
    env = os.environ if environ is None else environ
    return env.get(NO_SIGN_REQUEST, "").strip().lower() in _TRUE


@dataclass(frozen=True)
class Identity:
    """Who signs: botocore credentials (refreshable or not) and where they came from, or None (anonymous)
    and why. `source` names files, profiles and roles, never a secret."""

    credentials: Credentials | None
    source: str


class _UrlCaptured(Exception):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.url = url


class S3Endpoint:
    """An unsigned botocore S3 client, used only to build object URLs with botocore's endpoint rules."""

    def __init__(self, session: botocore.session.Session, region: str, endpoint: str | None, config: Config):
        self.region = region
        self.client = session.create_client("s3", region_name=region, endpoint_url=endpoint, config=config)
        self.client.meta.events.register("before-sign.s3.GetObject", self._capture)

    @staticmethod
    def _capture(request, **_: object) -> None:
        raise _UrlCaptured(request.url)

    def object_url(self, bucket: str, key: str) -> str:
        """The URL a GetObject of bucket/key goes to (addressing style, endpoint and region applied)."""
        try:
            self.client.get_object(Bucket=bucket, Key=key)
        except _UrlCaptured as captured:
            return captured.url
        except (BotoCoreError, ClientError) as exc:  # e.g. a bucket name botocore refuses
            raise SourceError(f"s3://{bucket}/{key}: {exc}") from None
        raise AssertionError("botocore sent a GetObject without signing it")  # pragma: no cover


class EnvironmentConfig:
    """One botocore session over the process environment and the AWS files it names."""

    def __init__(self) -> None:
        self.session = botocore.session.Session()
        region = os.environ.get("AWS_REGION") or self.session.get_config_variable("region") or DEFAULT_REGION
        unsigned = Config(signature_version=botocore.UNSIGNED)
        endpoint = os.environ.get("PT2SERVE_S3_ENDPOINT") or None
        self.endpoint = S3Endpoint(self.session, region, endpoint, unsigned)
        self._lock = threading.Lock()

    def identity(self) -> Identity:
        """Credentials from botocore's chain (cached by the session once found; searched again while none)."""
        if no_sign_request():
            return Identity(None, f"anonymous: {NO_SIGN_REQUEST} is set (or --no-sign-request)")
        try:
            with self._lock:
                credentials = self.session.get_credentials()
        except (BotoCoreError, ClientError, OSError, ValueError) as exc:
            raise SourceError(f"could not load AWS credentials{self._profile_text()}: {exc}") from None
        if credentials is None:
            return Identity(None, f"anonymous: no AWS credentials found (tried: {self.sources_tried()})")
        return Identity(credentials, self.describe(credentials))

    def sources_tried(self) -> str:
        resolver = self.session.get_component("credential_provider")
        values = {
            "credentials_file": self.session.get_config_variable("credentials_file"),
            "config_file": self.session.get_config_variable("config_file"),
        }
        names = [_SOURCES.get(p.METHOD, p.METHOD).format(**values) for p in resolver.providers]
        return ", ".join(dict.fromkeys(names)) + self._profile_text()

    def describe(self, credentials: Credentials) -> str:
        """Where the credentials came from: method, profile, role; never a secret."""
        method = getattr(credentials, "method", None) or "unknown"
        scoped = self._scoped_config()
        role = scoped.get("role_arn") or os.environ.get("AWS_ROLE_ARN")
        profile = self._profile_text()
        if method == "env":
            return "from the environment (AWS_ACCESS_KEY_ID)"
        setting = self.session.get_config_variable
        if method == "shared-credentials-file":
            return f"from the shared credentials file {setting('credentials_file')}{profile}"
        if method == "config-file":
            return f"from the config file {setting('config_file')}{profile}"
        if method in ("assume-role", "assume-role-with-web-identity"):
            web = method.endswith("web-identity")
            how = "with a web identity token" if web else "by an assume-role profile"
            return f"for role {role} assumed {how}{profile}"
        if method == "sso":
            account, role_name = scoped.get("sso_account_id"), scoped.get("sso_role_name")
            return f"from SSO (account {account}, role {role_name}){profile}"
        if method == "container-role":
            return "from the container credentials endpoint"
        if method == "iam-role":
            return "from the EC2 instance role (IMDS)"
        return f"from {_SOURCES.get(method, method)}{profile}"

    def _scoped_config(self) -> Mapping[str, str]:
        try:
            return self.session.get_scoped_config()
        except BotoCoreError:
            return {}

    def _profile_text(self) -> str:
        profile = self.session.profile
        return f" (profile {profile!r})" if profile else ""


def environment_config() -> EnvironmentConfig:
    """The configuration for the current environment; one per distinct set of AWS_* variables, so a
    refreshed credential is reused by every open and a changed environment is seen."""
    keys = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    try:
        return _environment_config(keys, os.environ.get("PT2SERVE_S3_ENDPOINT"))
    except (BotoCoreError, ClientError, OSError, ValueError) as exc:  # e.g. an absent profile, a bad file
        raise SourceError(f"AWS configuration: {exc}") from None


@functools.lru_cache(maxsize=16)
def _environment_config(_aws_environment: tuple, _endpoint: str | None) -> EnvironmentConfig:
    return EnvironmentConfig()


@functools.lru_cache(maxsize=16)
def explicit_endpoint(region: str, endpoint: str | None, addressing_style: str | None) -> S3Endpoint:
    """Endpoint rules for settings given in code: no configured endpoint, region or profile applies."""
    # no profile (AWS_PROFILE names one of the files not read) and no config file
    session = botocore.session.Session(session_vars={"profile": (None, None, None, None)})
    session.set_config_variable("config_file", os.devnull)
    config = Config(
        signature_version=botocore.UNSIGNED,
        ignore_configured_endpoint_urls=True,
        s3={"addressing_style": addressing_style} if addressing_style else None,
    )
    return S3Endpoint(session, region, endpoint, config)
