"""Where a remote object's reads go once a redirect named its final URL, and whose credentials go along.

httpx's client follows 301/302/303/307/308 (on every body path: its transports see each hop as a
request of its own) and drops `Authorization` when a hop leaves the origin. HttpSource then sends
later reads straight to the final URL: one round trip each, not two. Those direct requests must
not carry the origin's credentials either, so an auth flow (a bearer token, SigV4) and any
`Authorization` header run only for requests to the origin they were given for.

A signed redirect target (a CDN URL with an expiry in its query) eventually refuses: 403, 400 or
410 from the target, where the origin still answers. Then the read resolves again from the origin,
pinned to the version opened, and continues.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

# what a redirect target answers once its signature has expired (S3 and CloudFront: 403; GCS: 400;
# some CDNs: 410)
EXPIRED_STATUS = frozenset({400, 403, 410})
CREDENTIAL_HEADERS = ("authorization",)


def same_origin(a: httpx.URL | str, b: httpx.URL | str) -> bool:
    """Same scheme, host and port: the origin credentials were given for."""
    a, b = httpx.URL(a), httpx.URL(b)
    return (a.scheme, a.host, a.port or _default_port(a)) == (b.scheme, b.host, b.port or _default_port(b))


def keeps_credentials(url: httpx.URL | str, given_for: httpx.URL | str) -> bool:
    """Whether credentials given for `given_for` may go to `url`: the same origin, or the same host
    upgraded from http to https on the default ports (as httpx keeps them across such a redirect)."""
    if same_origin(url, given_for):
        return True
    url, given_for = httpx.URL(url), httpx.URL(given_for)
    return (
        url.host == given_for.host
        and (given_for.scheme, given_for.port or 80) == ("http", 80)
        and (url.scheme, url.port or 443) == ("https", 443)
    )


def without_credentials(headers: Mapping[str, str]) -> dict[str, str]:
    """`headers` minus those that carry the origin's credentials."""
    return {name: value for name, value in headers.items() if name.lower() not in CREDENTIAL_HEADERS}


def _default_port(url: httpx.URL) -> int:
    return 443 if url.scheme == "https" else 80
