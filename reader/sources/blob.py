"""Azure Blob Storage's dialect of HTTP range reads, over HttpSource (no Azure SDK needed here).

- The Blob service has no suffix ranges (`Range: bytes=-N` is not one of its two range forms:
  Azure answers the whole blob, Azurite a broken response), so an open is a HEAD (size and ETag)
  and then the tail as an explicit range, pinned with `If-Match` like every later read.
- Every request carries `x-ms-version` (bearer tokens need 2017-11-09 or later, open-ended ranges
  2011-08-18), and a credential from `BlobAuth`: a SAS in the query, or an Entra ID bearer token.
- 401/403 say which credential was refused and the service's error code, never a secret.

`is_blob_url` picks out plain https URLs of blobs (`https://<account>.blob.core.windows.net/...`
with or without a SAS, or any URL carrying a SAS), so they take this path too.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from .http import HttpOptions, HttpSource
from .policy import ExchangeView, StorePolicy

API_VERSION = "2023-11-03"
BLOB_HOST_SUFFIXES = (
    ".blob.core.windows.net",
    ".blob.core.chinacloudapi.cn",
    ".blob.core.usgovcloudapi.net",
    ".blob.storage.azure.net",  # Azure DNS zone endpoints: <account>.zNN.blob.storage.azure.net
)


def is_blob_url(url: str) -> bool:
    """An Azure blob by its host, or by the SAS in its query (`sv` and `sig`: Azurite, custom domains)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if host.endswith(BLOB_HOST_SUFFIXES):
        return True
    query = parse_qs(parts.query)
    return "sv" in query and "sig" in query


class BlobAuth(httpx.Auth):
    """`x-ms-version` on every request, plus what `credential` adds: it is called per request (a
    shared-key SAS is renewed, a token refreshed, before they expire) and returns query parameters
    to set and headers to add. `description` names the credential in errors (never its secret)."""

    def __init__(
        self,
        description: str,
        credential: Callable[[], Awaitable[tuple[str, dict[str, str]]]] | None = None,
    ) -> None:
        self.description = description
        self._credential = credential

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        request.headers["x-ms-version"] = API_VERSION
        if self._credential is not None:
            query, headers = await self._credential()
            if query:
                request.url = request.url.copy_with(query=query.encode("ascii"))
            request.headers.update(headers)
        yield request


class BlobPolicy(StorePolicy):
    """The Blob service: HEAD + tail open (no suffix ranges), one range a request, refusals that
    name the credential (never its secret) and the service's error code."""

    suffix_open = False
    multirange = False

    def __init__(self, auth: BlobAuth) -> None:
        self.auth = auth

    def explain(self, response: httpx.Response, exchange: ExchangeView, generic: str) -> str:
        status = response.status_code
        code = response.headers.get("x-ms-error-code", "no error code")
        if status == 404:  # at open (later, a 404 is a blob gone: SourceChanged)
            return f"HTTP 404 ({code}): no such blob or container"
        if status in (401, 403):
            return (
                f"HTTP {status} ({code}): Azure refused {self.auth.description}: "
                "a wrong account key, an expired or revoked signature or token, or no read permission "
                "on this blob"
            )
        return generic


async def open_blob(
    url: str,
    auth: BlobAuth,
    *,
    tail_size: int,
    options: HttpOptions | None,
    location: str | None = None,
    pinned: Mapping[str, Any] | None = None,
) -> HttpSource:
    """The blob at `url`, read with `auth`'s credential."""
    return await HttpSource.open(
        url,
        tail_size=tail_size,
        options=options,
        auth=auth,
        location=location,
        pinned=pinned,
        policy=BlobPolicy(auth),
    )


async def open_blob_url(
    url: str, *, tail_size: int, options: HttpOptions | None, pinned: Mapping[str, Any] | None = None
) -> HttpSource:
    """A plain https URL of a blob (its SAS, if any, stays in the query; the location shown omits it)."""
    has_sas = "sig" in parse_qs(urlsplit(url).query)
    description = "the SAS in the URL" if has_sas else "an anonymous request (no SAS in the URL)"
    return await open_blob(url, BlobAuth(description), tail_size=tail_size, options=options, pinned=pinned)
