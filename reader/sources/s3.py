"""s3://bucket/key as HTTP range reads, signed with AWS SigV4 by botocore's signer.

Settings come from the standard environment: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION / AWS_DEFAULT_REGION and
AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL (or PT2SERVE_S3_ENDPOINT). Custom
endpoints use path-style addressing; without an endpoint the AWS regional
virtual-hosted endpoint is used. No credentials means anonymous requests.
Only the environment is consulted: no config files, no instance metadata calls.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from urllib.parse import quote

import httpx
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from ..errors import SourceError
from .http import HttpOptions, HttpSource


@dataclass(frozen=True)
class S3Settings:
    region: str = "us-east-1"
    endpoint: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> S3Settings:
        env = os.environ if environ is None else environ
        return cls(
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            endpoint=env.get("PT2SERVE_S3_ENDPOINT")
            or env.get("AWS_ENDPOINT_URL_S3")
            or env.get("AWS_ENDPOINT_URL"),
            access_key=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
        )

    @property
    def anonymous(self) -> bool:
        return not (self.access_key and self.secret_key)


def parse_s3_location(location: str) -> tuple[str, str]:
    """s3://bucket/key → (bucket, key)."""
    rest = location[len("s3://") :] if location.startswith("s3://") else ""
    bucket, _, key = rest.partition("/")
    if not bucket or not key:
        raise SourceError(f"{location!r} is not an s3://bucket/key location")
    return bucket, key


def object_url(bucket: str, key: str, settings: S3Settings) -> str:
    quoted = quote(key, safe="/~")
    if settings.endpoint:
        return f"{settings.endpoint.rstrip('/')}/{bucket}/{quoted}"
    return f"https://{bucket}.s3.{settings.region}.amazonaws.com/{quoted}"


class SigV4(httpx.Auth):
    """Signs each request (retries included) with botocore's S3 SigV4 signer."""

    def __init__(self, settings: S3Settings) -> None:
        credentials = Credentials(settings.access_key, settings.secret_key, settings.session_token)
        self._signer = S3SigV4Auth(credentials, "s3", settings.region)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        signed = AWSRequest(
            method=request.method, url=str(request.url), headers=self._signed_headers(request)
        )
        self._signer.add_auth(signed)
        for name, value in signed.headers.items():
            request.headers[name] = value
        yield request

    @staticmethod
    def _signed_headers(request: httpx.Request) -> dict[str, str]:
        # Only what the server sees unchanged; hop-by-hop headers are not signed.
        skip = {"connection", "accept-encoding", "user-agent", "content-length"}
        return {name: value for name, value in request.headers.items() if name.lower() not in skip}


async def open_s3(
    location: str,
    *,
    tail_size: int,
    options: HttpOptions | None = None,
    settings: S3Settings | None = None,
) -> HttpSource:
    settings = settings or S3Settings.from_environment()
    bucket, key = parse_s3_location(location)
    auth = None if settings.anonymous else SigV4(settings)
    return await HttpSource.open(
        object_url(bucket, key, settings), tail_size=tail_size, options=options, auth=auth, location=location
    )
