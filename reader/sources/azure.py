"""az://container/blob: Azure Blob Storage, with the account and credentials Azure users already have.

Where they come from (the first that applies wins):

1. `AZURE_STORAGE_CONNECTION_STRING`: `AccountName` with `AccountKey` or `SharedAccessSignature`,
   the endpoint from `BlobEndpoint` (else `DefaultEndpointsProtocol` + `EndpointSuffix`), or
   `UseDevelopmentStorage=true` (the emulator's well-known account on 127.0.0.1:10000);
2. `AZURE_STORAGE_ACCOUNT_NAME` (or `AZURE_STORAGE_ACCOUNT`) with `AZURE_STORAGE_ACCOUNT_KEY`
   (or `AZURE_STORAGE_KEY`), or with `AZURE_STORAGE_SAS_TOKEN`;
3. `AZURE_STORAGE_ACCOUNT_NAME` alone: Entra ID through azure-identity's `DefaultAzureCredential`
   (environment service principal, workload identity, managed identity, Azure CLI, ...): a bearer
   token for Storage, fetched in a worker thread (the credential may call a metadata endpoint or
   the `az` CLI) and refreshed `TOKEN_REFRESH_BEFORE` seconds before it expires, off the event loop.

`PT2SERVE_AZURE_BLOB_ENDPOINT` overrides the endpoint (Azurite, Azure Stack, DNS-zone endpoints).

An account key never leaves this process: azure-storage-blob's public `generate_blob_sas` turns it
into a read-only SAS for this one blob, valid `SAS_LIFETIME` seconds and renewed `SAS_RENEW_BEFORE`
seconds ahead, so the signing is Microsoft's own code and not a hand-written HMAC canonicalisation.
A SAS or token only ever goes to the configured endpoint, tokens only over https.

The bytes are read by HttpSource with `blob.BlobPolicy` (retries, resume, parallel parts, pinning
by ETag). The Azure SDKs are the `pt2serve[azure]` extra and are imported only by the paths that need
them (a SAS needs neither).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from ..errors import LocationError, SourceError
from .blob import BlobAuth, open_blob
from .http import HttpOptions, HttpSource
from .keys import check_key
from .location import rest_of
from .refresh import Refreshing

STORAGE_SCOPE = "https://storage.azure.com/.default"
SAS_LIFETIME = 3600.0  # seconds a generated SAS is valid
SAS_RENEW_BEFORE = 900.0  # a generated SAS is replaced this long before it ends
TOKEN_REFRESH_BEFORE = 300.0  # an Entra ID token is refreshed this long before it expires (as azure-core)
DEVELOPMENT_ACCOUNT = "devstoreaccount1"
DEVELOPMENT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
INSTALL_HINT = "pip install 'pt2serve[azure]'"
_identity_log = logging.getLogger("azure.identity")

# Azure's container naming rules (plus the two special containers)
_CONTAINER = re.compile(r"\$root|\$web|(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")
_MAX_BLOB_NAME = 1024


def parse_az_location(location: str) -> tuple[str, str]:
    """az://container/blob -> (container, blob); anything else is a LocationError."""
    rest = rest_of(location, "az")
    if rest is None:
        raise LocationError(f"{location!r} is not an az://container/blob location")
    container, _, blob = rest.partition("/")
    if "?" in location or "#" in location:
        raise LocationError(
            "an az:// location carries no query or fragment: give a SAS in AZURE_STORAGE_SAS_TOKEN, "
            "or read the blob's https:// URL with its SAS"
        )
    if not _CONTAINER.fullmatch(container):
        raise LocationError(
            f"{location!r}: {container!r} is not an Azure container name (3-63 lowercase letters, digits "
            "and single hyphens); expected az://container/blob"
        )
    if not blob or blob.endswith("/") or len(blob) > _MAX_BLOB_NAME:
        raise LocationError(f"{location!r} names no blob; expected az://container/blob")
    check_key(location, blob, "blob name")
    return container, blob


@dataclass(frozen=True)
class AzureSettings:
    """The storage account, its blob endpoint and one credential (secrets kept out of repr)."""

    account: str | None = None
    endpoint: str | None = None  # the blob service's base URL, e.g. https://acct.blob.core.windows.net
    account_key: str | None = field(default=None, repr=False)
    sas_token: str | None = field(default=None, repr=False)
    source: str = "no configuration"  # where the credential came from, for messages

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> AzureSettings:
        env = os.environ if environ is None else environ
        override = env.get("PT2SERVE_AZURE_BLOB_ENDPOINT") or None
        connection = env.get("AZURE_STORAGE_CONNECTION_STRING")
        if connection:
            settings = _from_connection_string(connection)
        else:
            account = env.get("AZURE_STORAGE_ACCOUNT_NAME") or env.get("AZURE_STORAGE_ACCOUNT") or None
            key = env.get("AZURE_STORAGE_ACCOUNT_KEY") or env.get("AZURE_STORAGE_KEY") or None
            settings = cls(
                account=account,
                endpoint=f"https://{account}.blob.core.windows.net" if account else None,
                account_key=key,
                sas_token=None if key else env.get("AZURE_STORAGE_SAS_TOKEN") or None,
                source=_env_source(account, key, env),
            )
        return dataclasses.replace(settings, endpoint=override) if override else settings


def _env_source(account: str | None, key: str | None, env: Mapping[str, str]) -> str:
    if not account:
        return "no configuration"
    if key:
        return "AZURE_STORAGE_ACCOUNT_KEY"
    return "AZURE_STORAGE_SAS_TOKEN" if env.get("AZURE_STORAGE_SAS_TOKEN") else "AZURE_STORAGE_ACCOUNT_NAME"


def _from_connection_string(text: str) -> AzureSettings:
    fields: dict[str, str] = {}
    for part in text.strip().split(";"):
        if part.strip():
            name, equals, value = part.partition("=")  # values (keys, SAS) contain '='
            if not equals:
                raise SourceError("AZURE_STORAGE_CONNECTION_STRING is malformed: expected Name=Value;...")
            fields[name.strip().lower()] = value.strip()
    if fields.get("usedevelopmentstorage", "").lower() == "true":
        proxy = fields.get("developmentstorageproxyuri", "http://127.0.0.1:10000").rstrip("/")
        return AzureSettings(DEVELOPMENT_ACCOUNT, f"{proxy}/{DEVELOPMENT_ACCOUNT}", DEVELOPMENT_KEY,
                             source="AZURE_STORAGE_CONNECTION_STRING (development storage)")  # fmt: skip
    account = fields.get("accountname") or None
    endpoint = fields.get("blobendpoint") or None
    if endpoint is None and account:
        protocol = fields.get("defaultendpointsprotocol", "https")
        endpoint = f"{protocol}://{account}.blob.{fields.get('endpointsuffix', 'core.windows.net')}"
    if endpoint is None:
        raise SourceError("AZURE_STORAGE_CONNECTION_STRING names no AccountName and no BlobEndpoint")
    key = fields.get("accountkey") or None
    return AzureSettings(account, endpoint, key, None if key else fields.get("sharedaccesssignature") or None,
                         source="AZURE_STORAGE_CONNECTION_STRING")  # fmt: skip


def blob_url(endpoint: str, container: str, blob: str) -> str:
    return f"{endpoint.rstrip('/')}/{container}/{quote(blob, safe='/~')}"


# --------------------------------------------------------------------------- credentials


class StaticSas:
    """A SAS given by the user (environment or connection string): sent as it is."""

    def __init__(self, token: str) -> None:
        self._query = token.lstrip("?")

    async def __call__(self) -> tuple[str, dict[str, str]]:
        return self._query, {}


class SharedKeySas:
    """Read-only SAS tokens for one blob, signed with the account key by azure-storage-blob."""

    def __init__(self, account: str, key: str, container: str, blob: str) -> None:
        try:
            from azure.storage.blob import BlobSasPermissions, generate_blob_sas
        except ImportError:
            raise SourceError(f"az:// with an account key needs azure-storage-blob: {INSTALL_HINT}") from None
        self._sign = lambda expiry: generate_blob_sas(
            account, container, blob, account_key=key, permission=BlobSasPermissions(read=True), expiry=expiry
        )
        self._query = ""
        self._renew_at = 0.0

    async def __call__(self) -> tuple[str, dict[str, str]]:
        now = time.time()
        if now >= self._renew_at:  # a local HMAC: microseconds, no I/O
            expiry = datetime.datetime.fromtimestamp(now + SAS_LIFETIME, datetime.UTC)
            self._query = self._sign(expiry)
            self._renew_at = now + SAS_LIFETIME - SAS_RENEW_BEFORE
        return self._query, {}


class EntraToken:
    """Bearer tokens for Storage from a `get_token` credential (DefaultAzureCredential by default),
    fetched in a worker thread and refreshed before they expire; one refresh at a time."""

    def __init__(self, credential: object) -> None:
        self._credential = credential
        self._token = ""
        self._expires_on = 0.0
        self._refreshing = Refreshing()

    async def __call__(self) -> tuple[str, dict[str, str]]:
        await self._refreshing.refresh_if_due(self._due, self._refresh)
        return "", {"Authorization": f"Bearer {self._token}"}

    def _due(self) -> bool:
        return time.time() >= self._expires_on - TOKEN_REFRESH_BEFORE

    async def _refresh(self) -> None:
        from azure.core.exceptions import AzureError, ClientAuthenticationError

        try:
            token = await asyncio.to_thread(self._credential.get_token, STORAGE_SCOPE)  # type: ignore[attr-defined]
        except ClientAuthenticationError as exc:
            raise SourceError(
                "no Azure credential found: tried AZURE_STORAGE_CONNECTION_STRING, "
                "AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN (unset) and Entra ID via "
                f"DefaultAzureCredential: {_attempts(exc)}"
            ) from None
        except AzureError as exc:
            raise SourceError(f"no Entra ID token for Azure Storage: {_first_line(exc)}") from None
        self._token, self._expires_on = token.token, float(token.expires_on)


def _attempts(exc: Exception) -> str:
    """azure-identity's report of a credential chain, one clause per credential tried."""
    clauses = []
    for line in str(exc).splitlines():
        if line.startswith("\t"):
            name, _, reason = line.strip().partition(": ")
            reason = reason.removeprefix(name).strip().split(". ")[0].rstrip(".")
            clauses.append(f"{name} ({reason})")
    return "; ".join(clauses) or _first_line(exc)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def default_azure_credential() -> object:
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        raise SourceError(
            f"az:// with Entra ID (no account key or SAS set) needs azure-identity: {INSTALL_HINT}"
        ) from None
    # The chain's failure is our SourceError, one line; its own warning goes to the logging the
    # application set up, and not (through logging's last-resort handler) to a CLI's stderr.
    if not _identity_log.handlers:
        _identity_log.addHandler(logging.NullHandler())
    return DefaultAzureCredential()


def credential_for(
    settings: AzureSettings, container: str, blob: str, *, credential: object | None = None
) -> BlobAuth:
    """The BlobAuth for these settings: a SAS, a shared key turned into SAS tokens, or Entra ID."""
    if settings.sas_token:
        return BlobAuth(f"the SAS token from {settings.source}", StaticSas(settings.sas_token))
    if settings.account_key:
        if not settings.account:
            raise SourceError(f"{settings.source} gives an account key but no account name")
        return BlobAuth(
            f"the shared key of account {settings.account!r} (from {settings.source})",
            SharedKeySas(settings.account, settings.account_key, container, blob),
        )
    if not (settings.endpoint or "").lower().startswith("https://"):
        raise SourceError(
            f"Entra ID tokens are only sent over https, and the blob endpoint is {settings.endpoint!r}"
        )
    return BlobAuth(
        "the Entra ID token (DefaultAzureCredential)" if credential is None else "the Entra ID token",
        EntraToken(credential or default_azure_credential()),
    )


async def open_azure(
    location: str,
    *,
    tail_size: int,
    options: HttpOptions | None,
    settings: AzureSettings | None = None,
    credential: object | None = None,
    pinned: Mapping[str, Any] | None = None,
) -> HttpSource:
    """Open az://container/blob; `credential` (anything with azure-core's `get_token`) replaces
    DefaultAzureCredential when no key or SAS is configured."""
    container, blob = parse_az_location(location)
    settings = settings or AzureSettings.from_environment()
    if not settings.endpoint:
        raise SourceError(
            f"{location}: no Azure storage account configured: tried AZURE_STORAGE_CONNECTION_STRING and "
            "AZURE_STORAGE_ACCOUNT_NAME (both unset); set one (with AZURE_STORAGE_ACCOUNT_KEY, "
            "AZURE_STORAGE_SAS_TOKEN, or an Entra ID identity for the account)"
        )
    auth = credential_for(settings, container, blob, credential=credential)
    url = blob_url(settings.endpoint, container, blob)
    return await open_blob(url, auth, tail_size=tail_size, options=options, location=location, pinned=pinned)
