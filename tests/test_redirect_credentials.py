"""sources/transport/redirects.py's rule: credentials go only to the origin they were given for,
never downgraded (redirects followed for real: test_redirects.py)."""

from __future__ import annotations

import pytest

from reader.sources.transport.redirects import keeps_credentials, origin_of

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("url", "keeps"),
    [
        ("http://hub.example/other/path?x=1", True),  # the same origin
        ("http://hub.example:80/x", True),
        ("https://hub.example/x", True),  # upgraded to https on the same host, as httpx keeps them
        ("https://hub.example:8443/x", False),
        ("http://hub.example:8080/x", False),
        ("http://cdn.example/x", False),
        ("http://sub.hub.example/x", False),
    ],
)
def test_credentials_go_only_to_the_origin_they_were_given_for(url: str, keeps: bool) -> None:
    assert keeps_credentials(url, origin_of("http://hub.example/model.pt2")) is keeps
    assert not keeps_credentials(
        "http://hub.example/x", origin_of("https://hub.example/x")
    )  # never downgraded
