"""How one store departs from plain HTTP range reads: a small policy an `HttpSource` is given.

`HttpSource` reads every remote store the same way (the open, retries, resumes, pinning, parallel
parts, several ranges a request); what differs from store to store is answered here, each by one
member with the plain-HTTP answer as its default, so a store never overrides the reader's own
steps. Signing is not here: it is each store's `httpx.Auth`, run for the origin only.

- `suffix_open`: whether the open may ask `Range: bytes=-N` (Azure's Blob service has no suffix
  ranges: HEAD first);
- `multirange`: whether to ask for several ranges a request (None: ask once; False: never);
- `remember`: the open's answer read for the store's own validators (a Cloud Storage generation,
  a Hub commit), and the URL that names the version opened where the given one may move;
- `pinned_by_url`: the read URL itself names the version, so no `If-Match` is sent;
- `check_same`: an answer of another version refused (SourceChanged);
- `explain`: a final refusal's message in the store's terms (which credential, what is missing);
- `revalidate`: how the store says the version is still current (None: a conditional HEAD);
- `PINNED`: the store's own fields in `pinned()` (what a cache reopens a version by).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import httpx


class ExchangeView(Protocol):
    """What a policy sees of the source's requests (exchange.py's `Exchange`): the URLs, the
    validators it may clear, and requests of its own (a store's way to revalidate)."""

    url: str  # as given
    read_url: str  # where reads go now
    origin: str  # the only origin credentials go to
    location: str  # for messages
    etag: str | None
    last_modified: str | None

    def request(self, method: str, headers: Mapping[str, str], url: str | None = None) -> httpx.Request: ...

    async def send(
        self, request: httpx.Request, purpose: str, *, follow_redirects: bool = True
    ) -> httpx.Response: ...


class StorePolicy:
    """Plain HTTP(S) (and S3, whose only difference is signing and one range a request)."""

    suffix_open: bool = True
    multirange: bool | None = None
    PINNED: tuple[str, ...] = ()  # the store's own validators, attributes of the policy

    def identity(self) -> str | None:
        """What names the version opened where the store has its own name for it (None: the ETag)."""
        return None

    def remember(self, response: httpx.Response, exchange: ExchangeView) -> str | None:
        """Read the open's answer for the store's validators; the URL that names the version opened
        where `exchange.url` may move (None: `url` itself, pinned by its validators)."""
        return None

    def pinned_by_url(self, exchange: ExchangeView) -> bool:
        """Whether the URL reads go to names the version itself (no If-Match needed)."""
        return False

    def check_same(self, response: httpx.Response, exchange: ExchangeView) -> None:
        """Raise SourceChanged if `response` comes from another version than the one opened."""
        return None

    def explain(self, response: httpx.Response, exchange: ExchangeView, generic: str) -> str:
        """The message of a final refusal after the location (`generic`: `HTTP 403 (access denied)`)."""
        return generic

    async def revalidate(self, exchange: ExchangeView) -> bool | None:
        """True if the object is still the version opened, asked the store's way (one attempt;
        retried by the caller); None: asked as of any HTTP server."""
        return None

    def pinned(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.PINNED}

    def restore(self, pinned: Mapping[str, Any] | None) -> None:
        """Take the validators of `pinned` (None: forget them)."""
        for name in self.PINNED:
            setattr(self, name, None if pinned is None else pinned.get(name))


class OneRangePolicy(StorePolicy):
    """A store that answers one range a request (S3; SeaweedFS answers 200 and the whole object)."""

    multirange = False
