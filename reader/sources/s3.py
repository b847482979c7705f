"""s3://bucket/key as HTTP range reads, signed with AWS SigV4 by botocore's signer.

Without explicit `S3Settings`, credentials, region and endpoint come from botocore's resolution
(reader/sources/aws.py): the same chain and files boto3 uses, refreshed before they expire. With
`S3Settings`, exactly what they say: their keys, or anonymous requests without keys.

A refused request is a SourceError that names S3's error code (ExpiredToken, SignatureDoesNotMatch,
InvalidAccessKeyId, AccessDenied, ...), the access key id that signed it and where that key came
from (or why the request was anonymous, and which sources were searched); never a secret.
"""

from __future__ import annotations

import asyncio
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import AsyncGenerator, Generator, Mapping
from typing import Any

import httpx
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials, RefreshableCredentials
from botocore.exceptions import BotoCoreError, ClientError

from ..errors import LocationError, SourceError
from .aws import Identity, S3Endpoint, environment_config, explicit_endpoint
from .http import HttpSource
from .keys import check_key
from .location import rest_of
from .policy import OneRangePolicy
from .refresh import Refreshing
from .transport.options import HttpOptions, S3Settings

ERROR_BODY_CAP = 64 << 10  # bytes of an error body read to find S3's <Code>
ADVISORY_RETRY_SECONDS = 30.0  # after a refresh that failed while the old credentials still hold
# S3 error codes that mean "this signature or identity was refused", and what each says
REFUSALS = {
    "AccessDenied": "this identity may not read the object",
    "AllAccessDisabled": "all access to this object has been disabled",
    "ExpiredToken": "the credentials have expired",
    "TokenRefreshRequired": "the credentials have expired",
    "RequestExpired": "the signature has expired",
    "InvalidToken": "the session token is invalid",
    "InvalidAccessKeyId": "the server does not know this access key id",
    "SignatureDoesNotMatch": "the signature does not match (wrong secret key for this key id?)",
    "IncompleteSignature": "the signature is incomplete",
    "AuthorizationHeaderMalformed": "the authorization header is malformed (wrong region?)",
    "RequestTimeTooSkewed": "this machine's clock differs too much from the server's",
    "MissingSecurityHeader": "a required security header is missing",
    "AccountProblem": "the account has a problem that prevents access",
    "PermanentRedirect": "the bucket must be addressed at another endpoint",
}
REFUSAL_STATUS = (301, 400, 401, 403)  # a 301 reaches us only without Location: S3's wrong-region answer


def parse_s3_location(location: str) -> tuple[str, str]:
    """s3://bucket/key → (bucket, key)."""
    rest = rest_of(location, "s3") or ""
    bucket, _, key = rest.partition("/")
    if not bucket or not key:
        raise LocationError(f"{location!r} is not an s3://bucket/key location")
    check_key(location, key, "object key")
    return bucket, key


def resolve(location: str, settings: S3Settings | None) -> tuple[str, S3Endpoint, Identity]:
    """The object URL, the endpoint rules and who signs (blocking: call it in a thread)."""
    bucket, key = parse_s3_location(location)
    if settings is not None:
        endpoint, identity = explicit_settings(settings)
    else:
        config = environment_config()
        endpoint, identity = config.endpoint, config.identity()
    return endpoint.object_url(bucket, key), endpoint, identity


def explicit_settings(settings: S3Settings) -> tuple[S3Endpoint, Identity]:
    """The endpoint rules and who signs, as `settings` say: their keys, or anonymous without keys."""
    endpoint = explicit_endpoint(settings.region, settings.endpoint, settings.addressing_style)
    if settings.anonymous:
        return endpoint, Identity(None, "anonymous: S3Settings without access_key and secret_key")
    keys = Credentials(settings.access_key, settings.secret_key, settings.session_token, method="explicit")
    return endpoint, Identity(keys, "from S3Settings")


class SigV4(httpx.Auth):
    """Signs each request (retries included) with botocore's S3 SigV4 signer and turns a refused
    request into a SourceError that says who was refused and why.

    Credentials that need refreshing are refreshed in a thread (botocore refreshes with blocking
    I/O); the event loop keeps serving meanwhile."""

    def __init__(self, identity: Identity, region: str, location: str) -> None:
        self.identity = identity
        self.region = region
        self.location = location
        self._refreshing = Refreshing()
        self._quiet_until = 0.0

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        raise RuntimeError("SigV4 signs for httpx.AsyncClient only")

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        frozen = None
        if self.identity.credentials is not None:
            frozen = await self._current_credentials()
            self._sign(request, frozen)
        response = yield request
        if request.method != "HEAD" and response.status_code in REFUSAL_STATUS:
            code, message = await _s3_error(response)
            if code in REFUSALS or response.status_code == 403:
                await response.aclose()
                region = response.headers.get("x-amz-bucket-region")
                raise SourceError(self._refusal(response.status_code, code, message, frozen, region))

    async def _current_credentials(self) -> ReadOnlyCredentials:
        credentials = self.identity.credentials
        refreshed: list[ReadOnlyCredentials] = []

        async def refresh() -> None:
            refreshed.append(await asyncio.to_thread(credentials.get_frozen_credentials))
            if credentials.refresh_needed():  # refresh failed; the old ones still hold
                self._quiet_until = time.monotonic() + ADVISORY_RETRY_SECONDS

        try:
            if isinstance(credentials, RefreshableCredentials):
                await self._refreshing.refresh_if_due(lambda: self._refresh_due(credentials), refresh)
            return refreshed[0] if refreshed else credentials.get_frozen_credentials()
        except (BotoCoreError, ClientError, OSError, ValueError) as exc:
            raise SourceError(
                f"{self.location}: could not refresh AWS credentials {self.identity.source}: {exc}"
            ) from None

    def _refresh_due(self, credentials: RefreshableCredentials) -> bool:
        """Due when botocore would refresh; after a failed early refresh, only once it must."""
        if time.monotonic() < self._quiet_until:
            mandatory = getattr(credentials, "_mandatory_refresh_timeout", 600)
            return credentials.refresh_needed(mandatory)
        return credentials.refresh_needed()

    def _sign(self, request: httpx.Request, credentials: ReadOnlyCredentials) -> None:
        signed = AWSRequest(method=request.method, url=str(request.url), headers=_signed_headers(request))
        S3SigV4Auth(credentials, "s3", self.region).add_auth(signed)
        for name, value in signed.headers.items():
            request.headers[name] = value

    def _refusal(
        self,
        status: int,
        code: str | None,
        message: str | None,
        frozen: ReadOnlyCredentials | None,
        bucket_region: str | None,
    ) -> str:
        reason = {301: "moved", 401: "unauthorized", 403: "access denied"}.get(status, "bad request")
        said = f"S3 {code}: {REFUSALS.get(code, message or 'refused')}" if code else "refused"
        if frozen is None:
            who = f"the request was {self.identity.source}"
        else:
            who = f"signed with access key id {frozen.access_key} {self.identity.source}"
        where = ""
        if bucket_region and bucket_region != self.region:
            where = f"; the bucket is in {bucket_region}, not {self.region} (set AWS_REGION)"
        return f"{self.location}: HTTP {status} ({reason}): {said}; {who}{where}"


def _signed_headers(request: httpx.Request) -> dict[str, str]:
    # Only what the server sees unchanged; hop-by-hop headers are not signed.
    skip = {"connection", "accept-encoding", "user-agent", "content-length"}
    return {name: value for name, value in request.headers.items() if name.lower() not in skip}


async def _s3_error(response: httpx.Response) -> tuple[str | None, str | None]:
    """S3's <Error><Code> and <Message> from a (small) error body, or (None, None)."""
    body = bytearray()
    try:
        async for chunk in response.aiter_raw():
            body += chunk
            if len(body) >= ERROR_BODY_CAP:
                break
    except httpx.TransportError:
        pass
    try:
        root = ElementTree.fromstring(bytes(body))
    except ElementTree.ParseError:
        return None, None
    return root.findtext("Code"), root.findtext("Message")


async def open_s3(
    location: str,
    *,
    tail_size: int,
    options: HttpOptions | None = None,
    settings: S3Settings | None = None,
    pinned: Mapping[str, Any] | None = None,
) -> HttpSource:
    url, endpoint, identity = await asyncio.to_thread(resolve, location, settings)
    auth = SigV4(identity, endpoint.region, location)
    return await HttpSource.open(
        url,
        tail_size=tail_size,
        options=options,
        auth=auth,
        location=location,
        pinned=pinned,
        policy=OneRangePolicy(),  # S3 answers one range a request (SeaweedFS: 200 and the whole object)
    )
