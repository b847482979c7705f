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

import httpx

# what a redirect target answers once its signature has expired (S3 and CloudFront: 403; GCS: 400;
# some CDNs: 410)
EXPIRED_STATUS = frozenset({400, 403, 410})
CREDENTIAL_HEADERS = ("authorization",)


Origin = tuple[str, str, int]  # scheme, host, port


def origin_of(url: httpx.URL | str) -> Origin:
    """The origin credentials are given for: scheme, host and port (the scheme's default if none)."""
    url = url if isinstance(url, httpx.URL) else httpx.URL(url)
    return url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80)


def keeps_credentials(url: httpx.URL | str, given_for: Origin) -> bool:
    """Whether credentials given for the origin `given_for` may go to `url`: the same origin, or the
    same host upgraded from http to https on the default ports (as httpx keeps them across such a
    redirect). Per request: `given_for` is worked out once."""
    target = origin_of(url)
    return target == given_for or (given_for[::2] == ("http", 80) and target == ("https", given_for[1], 443))


def without_credentials(headers: httpx.Headers) -> None:
    """Drop the headers that carry the origin's credentials."""
    for name in CREDENTIAL_HEADERS:
        headers.pop(name, None)
