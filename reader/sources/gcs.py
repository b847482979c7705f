"""gs://bucket/object as HTTP range reads of Cloud Storage's JSON API media downloads.

- The URL is the object's media link, `{endpoint}/download/storage/v1/b/{bucket}/o/{object}?alt=media`,
  read by HttpSource (the 2-request open, retries resumed from the next byte, parallel parts, stats).
- Pinned by generation: the open's answer names the object's generation (`x-goog-generation`), and
  every later request asks for that generation, so an object replaced meanwhile answers 404
  (SourceChanged), or its old bytes where the bucket keeps versions; never a mix. ETags are not
  used: the JSON API's change with the object's metadata, its generation only with its bytes.
- Credentials: Application Default Credentials, found by google-auth (`pip install 'pt2serve[gcs]'`):
  GOOGLE_APPLICATION_CREDENTIALS (a service-account or authorized-user file), gcloud's
  application_default_credentials.json, the metadata server on GCE/GKE/Cloud Run. The bearer token
  is refreshed before it expires, in a worker thread (google-auth's refresh blocks). Where ADC
  finds nothing, requests go unsigned (public objects).
- STORAGE_EMULATOR_HOST (`host:port` or a URL) reads from an emulator, unsigned, as Google's
  client libraries do; PT2SERVE_GCS_ENDPOINT names another endpoint (Private Service Connect)
  that still gets credentials.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import warnings
from collections.abc import AsyncGenerator, Generator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from ..errors import LocationError, SourceChanged, SourceError
from .http import HttpOptions, HttpSource
from .keys import check_key
from .location import rest_of
from .policy import ExchangeView, StorePolicy
from .refresh import Refreshing

DEFAULT_ENDPOINT = "https://storage.googleapis.com"
READ_SCOPE = "https://www.googleapis.com/auth/devstorage.read_only"
INSTALL_HINT = "pip install 'pt2serve[gcs]'"
# Cloud Storage's bucket naming rules: 3-63 characters (222 with dots), lowercase letters, digits,
# '-', '_' and '.', starting and ending with a letter or digit.
BUCKET_NAME = re.compile(r"[a-z0-9](?:[a-z0-9._-]{1,220})[a-z0-9]")
MAX_OBJECT_NAME = 1024  # bytes of UTF-8
# google-auth warns (several lines on stderr) when gcloud's user credentials carry no quota project:
# that matters to APIs that bill a project, not to reading objects.
warnings.filterwarnings("ignore", message="Your application has authenticated using end user credentials")


# -- locations and endpoints -------------------------------------------------------------------


def parse_gs_location(location: str) -> tuple[str, str]:
    """gs://bucket/object -> (bucket, object), or LocationError naming what is wrong."""
    rest = rest_of(location, "gs")
    bucket, _, name = (rest or "").partition("/")
    usage = f"{location!r} is not a gs://bucket/object location"
    if rest is None or not bucket:
        raise LocationError(usage)
    if not BUCKET_NAME.fullmatch(bucket) or (len(bucket) > 63 and "." not in bucket):
        raise LocationError(
            f"{usage}: {bucket!r} is not a Cloud Storage bucket name "
            "(3-63 characters: lowercase letters, digits, '-', '_', '.')"
        )
    if not name:
        raise LocationError(f"{usage}: no object name after the bucket")
    if name in (".", "..") or "\r" in name or "\n" in name or len(name.encode()) > MAX_OBJECT_NAME:
        raise LocationError(f"{usage}: {name[:80]!r} is not a Cloud Storage object name")
    check_key(location, name, "object name")
    return bucket, name


@dataclass(frozen=True)
class GcsSettings:
    """Where gs:// reads go, and whether they carry credentials."""

    endpoint: str = DEFAULT_ENDPOINT
    emulator: bool = False  # STORAGE_EMULATOR_HOST: no credentials, as Google's clients do

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> GcsSettings:
        env = os.environ if environ is None else environ
        if emulator := env.get("STORAGE_EMULATOR_HOST", "").strip():
            return cls(endpoint=_with_scheme(emulator), emulator=True)
        if endpoint := env.get("PT2SERVE_GCS_ENDPOINT", "").strip():
            return cls(endpoint=_with_scheme(endpoint, default="https"))
        return cls()


def _with_scheme(host: str, default: str = "http") -> str:
    return (host if "://" in host else f"{default}://{host}").rstrip("/")


def media_url(endpoint: str, bucket: str, name: str) -> str:
    return f"{endpoint}/download/storage/v1/b/{bucket}/o/{quote(name, safe='')}?alt=media"


# -- credentials -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FoundCredentials:
    """What Application Default Credentials found: google-auth credentials (None: unsigned
    requests) and where they came from (a path or "the metadata server", never a secret)."""

    credentials: Any
    origin: str

    @property
    def description(self) -> str:
        """Which identity and from where, for error messages: an email and a path, never a secret."""
        credentials = self.credentials
        if credentials is None:
            return self.origin
        email = getattr(credentials, "service_account_email", None)  # the metadata server's: once refreshed
        if self.origin == METADATA_SERVER:
            return f"{METADATA_SERVER}'s service account ({email})"
        if email:
            return f"service account {email} from {self.origin}"
        if type(credentials).__module__ == "google.oauth2.credentials":  # an authorized user (gcloud)
            return f"user credentials of {getattr(credentials, 'account', '') or 'a user'} from {self.origin}"
        return f"{type(credentials).__name__} credentials from {self.origin}"


METADATA_SERVER = "the metadata server"


def find_credentials() -> FoundCredentials:
    """Application Default Credentials, looked up once per process and configuration (the metadata
    server probe can take seconds where there is none). Blocking: call it in a thread."""
    env = os.environ
    return _find_credentials(
        env.get("GOOGLE_APPLICATION_CREDENTIALS"), env.get("CLOUDSDK_CONFIG"), env.get("HOME")
    )


@functools.cache
def _find_credentials(explicit: str | None, _cloudsdk: str | None, _home: str | None) -> FoundCredentials:
    try:
        import google.auth
        import google.auth.transport.requests  # the refresh transport: missing without the extra
        from google.auth import _cloud_sdk, compute_engine, exceptions
    except ImportError:
        raise SourceError(
            f"gs:// reads need google-auth for Application Default Credentials: {INSTALL_HINT}"
        ) from None
    gcloud_file = _cloud_sdk.get_application_default_credentials_path()
    try:
        credentials, _project = google.auth.default(scopes=[READ_SCOPE])
    except exceptions.DefaultCredentialsError as exc:
        if explicit:
            raise SourceError(f"gs://: GOOGLE_APPLICATION_CREDENTIALS={explicit}: {exc}") from None
        return FoundCredentials(
            None,
            "no credentials (unsigned requests): Application Default Credentials found none "
            f"(tried GOOGLE_APPLICATION_CREDENTIALS: unset, {gcloud_file}: absent, {METADATA_SERVER}: "
            "not reachable)",
        )
    if isinstance(credentials, compute_engine.Credentials):
        origin = METADATA_SERVER
    else:
        origin = f"GOOGLE_APPLICATION_CREDENTIALS ({explicit})" if explicit else gcloud_file
    return FoundCredentials(credentials, origin)


def _refresh_request() -> Any:
    import google.auth.transport.requests

    return google.auth.transport.requests.Request()


class GoogleBearer(httpx.Auth):
    """Adds the credentials' bearer token to each request (retries included), refreshing it in a
    worker thread when it is missing or near expiry (google-auth's `valid` keeps a margin of a few
    minutes), and once more when the server answers 401 to it."""

    def __init__(self, found: FoundCredentials) -> None:
        self.found = found
        self.credentials = found.credentials
        self._refreshing = Refreshing()

    @property
    def description(self) -> str:
        return self.found.description

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        raise RuntimeError("GoogleBearer refreshes tokens off the event loop: use an httpx.AsyncClient")

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        token = await self._token()
        self._apply(request, token)
        response = yield request
        if response.status_code == 401:
            self._apply(request, await self._token(rejected=token))
            yield request

    def _apply(self, request: httpx.Request, token: str) -> None:
        request.headers["Authorization"] = f"Bearer {token}"
        if quota_project := getattr(self.credentials, "quota_project_id", None):
            request.headers["x-goog-user-project"] = quota_project

    async def _token(self, rejected: str | None = None) -> str:
        credentials = self.credentials

        def due() -> bool:
            return not (credentials.valid and credentials.token != rejected)

        await self._refreshing.refresh_if_due(due, self._refresh)
        return credentials.token

    async def _refresh(self) -> None:
        from google.auth import exceptions

        try:
            await asyncio.to_thread(self.credentials.refresh, _refresh_request())
        except exceptions.TransportError as exc:  # the token endpoint unreachable: worth a retry
            raise httpx.ConnectError(f"refreshing the token of {self.description}: {exc}") from None
        except exceptions.RefreshError as exc:
            raise SourceError(f"gs://: refreshing the token of {self.description} failed: {exc}") from None


class Unsigned(httpx.Auth):
    """No credentials; says why, for error messages."""

    def __init__(self, description: str) -> None:
        self.description = description

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        yield request


# -- the source --------------------------------------------------------------------------------


class GcsPolicy(StorePolicy):
    """Cloud Storage: pinned to the generation its open saw; refusals name the credentials used."""

    multirange = False  # Cloud Storage answers one range a request
    PINNED = ("generation",)

    def __init__(self, auth: GoogleBearer | Unsigned) -> None:
        self.auth = auth  # its description names the credentials in messages (never a secret)
        self.generation: str | None = None

    def identity(self) -> str:
        return f"generation:{self.generation}"

    def remember(self, response: httpx.Response, exchange: ExchangeView) -> str:
        """The generation the answer names; later reads name it (`url` names the live object)."""
        generation = response.headers.get("x-goog-generation", "")
        if not generation.isdigit():
            raise SourceError(
                f"{exchange.location}: the answer names no object generation (x-goog-generation): "
                f"is {response.url.host} Cloud Storage?"
            )
        self.generation = generation
        # the generation alone names the bytes: Google's ETag and Last-Modified also move when only
        # metadata changes, so pinning or versioning by them would refuse unchanged bytes
        exchange.etag = exchange.last_modified = None
        return f"{exchange.url}&generation={generation}"

    def pinned_by_url(self, exchange: ExchangeView) -> bool:
        return True  # every read names the generation

    def check_same(self, response: httpx.Response, exchange: ExchangeView) -> None:
        generation = response.headers.get("x-goog-generation")
        if generation and generation != self.generation:
            raise SourceChanged(
                f"{exchange.location} changed: generation {self.generation} is now {generation}"
            )

    def explain(self, response: httpx.Response, exchange: ExchangeView, generic: str) -> str:
        if response.status_code in (401, 403, 404):
            return f"{generic}; credentials: {self.auth.description}"
        return generic

    async def revalidate(self, exchange: ExchangeView) -> bool:
        """True if the object's current generation is still the one opened (a 1-byte read)."""
        request = exchange.request("GET", {"Range": "bytes=0-0"}, exchange.url)
        response = await exchange.send(request, "revalidate")
        await response.aclose()
        return (
            response.status_code in (200, 206)
            and response.headers.get("x-goog-generation") == self.generation
        )


async def open_gcs(
    location: str,
    *,
    tail_size: int,
    options: HttpOptions | None = None,
    settings: GcsSettings | None = None,
    pinned: Mapping[str, Any] | None = None,
) -> HttpSource:
    bucket, name = parse_gs_location(location)
    settings = settings or GcsSettings.from_environment()
    if settings.emulator:
        auth: GoogleBearer | Unsigned = Unsigned(f"none (STORAGE_EMULATOR_HOST={settings.endpoint})")
    else:
        found = await asyncio.to_thread(find_credentials)
        auth = Unsigned(found.description) if found.credentials is None else GoogleBearer(found)
    url = media_url(settings.endpoint, bucket, name)
    policy = GcsPolicy(auth)
    return await HttpSource.open(
        url, tail_size=tail_size, options=options, auth=auth, location=location, pinned=pinned, policy=policy
    )
