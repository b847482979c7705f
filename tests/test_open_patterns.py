"""--allow-open patterns match a location's parsed parts, each part on its own (app/open_patterns.py,
app/open_policy.py).

A table of what each part's glob admits and refuses; patterns that cannot be parsed fail at start-up;
and property tests: whatever the policy admits still lies inside the pattern once the client has
built the request (httpx's host, port and path, its `..` resolved), once botocore has built and
signed the S3 path, and once the reader has split an hf://, gs:// or az:// location and built its URL.
"""

from __future__ import annotations

import functools
from urllib.parse import quote, unquote

import httpx
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reader
from app.addresses import host_key
from app.errors import ApiError
from app.open_patterns import ObjectParts, PatternError, UrlParts, check_segments, parse_hub
from app.open_policy import OpenPolicy
from app.settings import Settings
from reader.sources.aws import explicit_endpoint
from reader.sources.azure import blob_url, parse_az_location
from reader.sources.gcs import media_url, parse_gs_location
from reader.sources.hf import parse_hf_location
from reader.sources.s3 import parse_s3_location

pytestmark = pytest.mark.unit

PATTERNS = (
    "http://*.example.com/*",
    "http://127.0.0.1:8000/models/*",
    "https://cdn.example.com/m/**?*",
    "http://[::1]:*/x/*.pt2",
    "s3://team-models/*",
    "s3://team-*/shared/**",
    "gs://bucket-a/models/*.pt2",
    "az://team/**",
    "hf://org/*",
    "hf://datasets/org/data@v*/**",
    "hf://gpt2@main/*.pt2",
)
POLICY = OpenPolicy(PATTERNS)


def admitted(location: str) -> bool:
    try:
        POLICY.check(location)
    except ApiError as exc:
        assert exc.status == 403 and exc.code == "open_refused"
        return False
    return True


ADMITTED = [
    "http://a.example.com/x.pt2",
    "http://A.Example.COM/x.pt2",  # a host is compared lowercase
    "http://a.example.com:80/x.pt2",  # the default port, spelled out
    "http://127.0.0.1:8000/models/m.pt2",
    "https://cdn.example.com/m/a/b/c.pt2?X-Amz-Signature=s",
    "https://cdn.example.com/m/a.pt2",  # `?*`: any query, or none
    "http://[::1]:5/x/m.pt2",
    "http://[0:0::1]:5/x/m.pt2",  # an address in any spelling
    "s3://team-models/m.pt2",
    "s3://team-x/shared/a/b/m.pt2",
    "gs://bucket-a/models/m.pt2",
    "az://team/a/b/m.pt2",
    "hf://org/repo/m.pt2",
    "hf://org/repo/sub/m.pt2",
    "hf://org/repo@abc/m.pt2",  # no @ in the pattern: any revision
    "hf://datasets/org/data@v2/x/y.pt2",
    "hf://gpt2@main/m.pt2",
]
REFUSED = [
    # a host glob stays within the host, and `*` within one label
    "http://127.0.0.1:8000/.example.com/x.pt2",
    "http://a.b.example.com/x.pt2",
    "http://example.com/x.pt2",
    "http://a.example.com.evil.test/x.pt2",
    "http://.example.com/x.pt2",
    "http://a..example.com/x.pt2",
    "http://a.example.com./x.pt2",  # the same host to DNS, another to the patterns: refused
    "http://a.example.com@127.0.0.1/x.pt2",  # userinfo
    "http://u:p@a.example.com/x.pt2",
    # the port: the scheme's default without `:*`
    "http://a.example.com:8080/x.pt2",
    "https://a.example.com/x.pt2",  # another scheme
    # a path glob stays within a segment; `**` only where the pattern says it
    "http://a.example.com/d/x.pt2",
    "http://127.0.0.1:8000/admin/secret",
    "http://127.0.0.1:8000/models/a/m.pt2",
    # a named host on another port
    "http://127.0.0.1:8001/models/m.pt2",
    # queries and fragments
    "http://a.example.com/x.pt2?f=a.pt2",
    "http://a.example.com/x.pt2?",
    "http://a.example.com/x.pt2#frag",
    "https://cdn.example.com/m/a.pt2#f",
    # dot and empty segments, raw or encoded, and encoded slashes
    "http://127.0.0.1:8000/models/../admin/secret",
    "http://127.0.0.1:8000/models/./m.pt2",
    "http://127.0.0.1:8000/models/%2e%2e/admin",
    "http://127.0.0.1:8000/models/%2E./admin",
    "http://127.0.0.1:8000/models/.%2e/admin",
    "http://127.0.0.1:8000/models/%252e%252e/admin",
    "https://cdn.example.com/m/..;/admin/secret",  # `..` to servers that drop path parameters
    "https://cdn.example.com/m/..;x=1/admin/secret",
    "https://cdn.example.com/m/%2e%2e%3b/admin/secret",
    "https://cdn.example.com/m/a/.;/m.pt2",
    "http://127.0.0.1:8000/models/..;",
    "http://127.0.0.1:8000/models/a%2fb",
    "http://127.0.0.1:8000/models/a%5Cb",
    "http://127.0.0.1:8000/models//m.pt2",
    "http://127.0.0.1:8000/models/",
    "http://a.example.com\\@127.0.0.1/x.pt2",
    "s3://team-models/../other-bucket/secret.pt2",
    "s3://team-models/./m.pt2",
    "s3://team-models/%2e%2e/other-bucket/secret.pt2",
    "s3://team-models//m.pt2",
    "s3://team-models/a/m.pt2",  # `*` does not cross `/`
    "s3://team-models/m.pt2?versionId=1",
    "s3://other-bucket/m.pt2",
    "s3://team-x/m.pt2",
    "gs://bucket-a/models/../secret.pt2",
    "gs://bucket-a/models/m.bin",
    "az://team/../othercontainer/secret.pt2",
    "az://teams/m.pt2",
    # hf: the repository is split as the reader splits it
    "hf://org/m.pt2",  # the repository `org`, not `org/*`
    "hf://org/repo/../other/m.pt2",
    # a revision is sent encoded (`..%2F..%2Fother`), but a server in front may decode it
    "hf://org/repo@..%2F..%2Fother%2Frepo%2Fresolve%2Fmain/m.pt2",
    "hf://org/repo@a%2F..%2F..%2F..%2Fother/m.pt2",
    "hf://org/repo@refs%2Fconvert%2F..%2F..%2Fx/m.pt2",
    "hf://other/repo/m.pt2",
    "hf://datasets/org/data/m.pt2",  # revision main, not v*
    "hf://org/repo/m.pt2?x",
    "hf://gpt2@main/sub/m.pt2",
    "ftp://a.example.com/x.pt2",
]


@pytest.mark.parametrize("location", ADMITTED)
def test_each_part_admits_what_its_glob_says(location):
    assert admitted(location), location


@pytest.mark.parametrize("location", REFUSED)
def test_no_glob_reaches_outside_its_part(location):
    assert not admitted(location), location


def test_a_refusal_names_the_rule():
    rules = {
        "http://127.0.0.1:8000/models/../admin/secret": "'.', '..' or empty segment",
        "http://u:p@a.example.com/x.pt2": "credentials",
        "http://a.example.com/x.pt2#frag": "fragment",
        "s3://other-bucket/m.pt2": "matches no --allow-open pattern",
    }
    for location, rule in rules.items():
        with pytest.raises(ApiError) as refused:
            POLICY.check(location)
        assert rule in refused.value.message


def test_a_named_host_is_exempt_on_its_port_only():
    """The address rule's exemption: (host, port) of each pattern whose host has no wildcard."""
    assert POLICY.named == {("127.0.0.1", 8000), ("cdn.example.com", 443), ("::1", None)}


def test_a_named_host_and_port_is_reached_only_within_its_patterns():
    """A wildcard pattern does not widen what a named host serves: `/admin` on the named host:port
    is refused although `http://*:*/**` would admit it elsewhere."""
    policy = OpenPolicy(["http://*:*/**", "http://127.0.0.1:8000/models/*"])
    assert policy.named == {("127.0.0.1", 8000)}
    policy.check("http://127.0.0.1:8000/models/m.pt2")
    policy.check("http://127.0.0.1:9000/admin/m.pt2")  # not named: the address rule decides
    policy.check("http://a.example.com/x/y.pt2")
    with pytest.raises(ApiError):
        policy.check("http://127.0.0.1:8000/admin/m.pt2")


def test_every_request_url_is_checked_and_a_refusal_says_no_url():
    POLICY.check_url("http://127.0.0.1:8000/models/m.pt2")
    for url in ("http://127.0.0.1:8001/models/m.pt2", "http://127.0.0.1:8000/admin/secret"):
        with pytest.raises(reader.HostRefused) as refused:
            POLICY.check_url(url)
        assert "127.0.0.1" not in str(refused.value) and "admin" not in str(refused.value)


@pytest.mark.parametrize(
    "pattern",
    [
        "http://user@*.example.com/*",
        "http://*.example.com/*#x",
        "http://*.example.com:port/*",
        "http://*.example.com/models/../*",
        "http://*.example.com/models//*",
        "s3://bucket/../*",
        "hf://org/a/b/c@main/*",
        "ftp://*",
        "http:///x",
    ],
)
def test_a_pattern_that_cannot_be_parsed_fails_at_start_up(pattern):
    with pytest.raises(PatternError):
        OpenPolicy([pattern])
    with pytest.raises(ValueError, match="allow-open"):
        Settings.from_environment(environ={"PT2SERVE_ALLOW_OPEN": pattern})


# -- the reader refuses what httpx would resolve --------------------------------------------------


@pytest.mark.parametrize(
    ("parse", "location"),
    [
        (parse_s3_location, "s3://team-models/../other-bucket/secret.pt2"),
        (parse_s3_location, "s3://team-models/a/./m.pt2"),
        (parse_s3_location, "s3://team-models/a//m.pt2"),
        (parse_s3_location, "s3://team-models/a/"),
        (parse_gs_location, "gs://bucket-a/models/../secret.pt2"),
        (parse_gs_location, "gs://bucket-a/./m.pt2"),
        (parse_az_location, "az://team/../othercontainer/secret.pt2"),
        (parse_az_location, "az://team/a//m.pt2"),
        (parse_hf_location, "hf://org/repo/../other/m.pt2"),
    ],
)
def test_the_reader_refuses_dot_and_empty_segments_in_a_key(parse, location):
    with pytest.raises(reader.LocationError, match=r"segment|not a file path"):
        parse(location)


# -- property tests: what is admitted stays inside once the client and signer have built it -------

CLEAN = st.sampled_from(["models", "m.pt2", "x.pt2", "a", "shared", "data"])
TRICKY = st.sampled_from(
    [".", "..", "", "%2e", "%2E%2e", ".%2e", "%252e%252e",
     "%2f", "a%2Fb", "b c", "é", "%", "%25", ";x", "*", "a?b", "a#b", "x\\y", "..."]
)  # fmt: skip
PATHS = st.lists(st.one_of(CLEAN, CLEAN, TRICKY), min_size=1, max_size=4).map("/".join)  # 2 clean : 1 tricky
# near the patterns above, so that many examples are admitted and then checked
NEAR_URLS = ["http://a.example.com", "http://127.0.0.1:8000/models", "https://cdn.example.com/m", "http://[::1]:5/x",
             "http://[0::1]:80/x", "http://A.example.com:80"]  # fmt: skip


def _sent_parts(location: str) -> UrlParts:
    """The parts of the request httpx builds for `location`, read from the request itself."""
    url = httpx.AsyncClient().build_request("GET", location).url
    path, mark, query = url.raw_path.decode("ascii").partition("?")
    port = url.port or {"http": 80, "https": 443}[url.scheme]
    return UrlParts(url.scheme, host_key(url.raw_host.decode("ascii")), port, path, query if mark else None)


def _segments(path: str) -> list[str]:
    """A request path's segments as the server reads them: httpx may percent-encode more than the
    reader did (`é`), never drop or join a segment."""
    return [unquote(segment) for segment in path.split("/")]


def _clean(path: str) -> bool:
    try:
        check_segments(path, "path")
    except Exception:
        return False
    return True


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.one_of(
        st.sampled_from(NEAR_URLS),
        st.sampled_from(NEAR_URLS),
        st.sampled_from(NEAR_URLS),
        st.builds(
            "{}://{}{}".format,
            st.sampled_from(["http", "https"]),
            st.sampled_from(
                ["a.example.com", "a.b.example.com", "127.0.0.1", "[::1]", "127.0.0.1.", "2130706433"]
            ),
            st.sampled_from(["", ":80", ":8000", ":8001", ":443", ":1"]),
        ),
    ),
    path=PATHS,
    suffix=st.sampled_from(["", ".pt2"]),
    query=st.one_of(st.just(""), st.sampled_from(["?", "?a=1", "?a=%2e%2e/b", "#f", "?a#f"])),
)
def test_an_admitted_url_lies_inside_its_pattern_as_httpx_sends_it(base, path, suffix, query):
    location = f"{base}/{path}{suffix}{query}"
    if not admitted(location):
        return
    sent = _sent_parts(location)
    assert _clean(sent.path[1:]), (location, sent)
    # the same parts, read from what httpx sends, pass the patterns again
    naming = [p for p in POLICY.parsed.urls if p.names(sent.host, sent.port)]
    assert any(p.matches(sent) for p in naming or [p for p in POLICY.parsed.urls if p.host_glob is not None])
    POLICY.check_url(str(httpx.URL(location)))  # the hook, as a redirect hop would be checked
    if sent.host.endswith(".example.com") and sent.host != "cdn.example.com":  # `http://*.example.com/*`
        assert sent.host.count(".") == 2 and sent.path.count("/") == 1 and sent.query is None


@functools.cache
def _s3_endpoint():
    return explicit_endpoint("us-east-1", "http://127.0.0.1:9000", "path")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    bucket=st.sampled_from(["team-models", "team-x", "other-bucket"]),
    key=st.one_of(PATHS, PATHS.map("shared/{}".format)),
)
def test_an_admitted_s3_key_is_what_botocore_builds_and_signs(bucket, key):
    location = f"s3://{bucket}/{key}"
    if not admitted(location):
        return
    assert parse_s3_location(location) == (bucket, key)  # the reader splits it alike
    url = _s3_endpoint().object_url(bucket, key)
    sent = httpx.URL(url).raw_path.decode("ascii")
    signer = S3SigV4Auth(Credentials("AKIDEXAMPLE", "secret"), "s3", "us-east-1")
    signed = signer.canonical_request(AWSRequest(method="GET", url=str(httpx.URL(url)), headers={}))
    assert signed.split("\n")[1] == sent  # what is signed is what is sent
    sent_bucket, _, sent_key = sent[1:].partition("/")
    assert (sent_bucket, unquote(sent_key)) == (bucket, key)  # ... and names the object checked
    assert any(p.matches(ObjectParts("s3", sent_bucket, unquote(sent_key))) for p in POLICY.parsed.objects)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    container=st.sampled_from(["team", "bucket-a", "other"]),
    key=st.one_of(PATHS, PATHS.map("models/{}.pt2".format)),
    scheme=st.sampled_from(["gs", "az"]),
)
def test_an_admitted_gs_or_az_object_is_the_one_requested(container, key, scheme):
    location = f"{scheme}://{container}/{key}"
    if not admitted(location):
        return
    if scheme == "gs":
        try:
            assert parse_gs_location(location) == (container, key)
        except reader.LocationError:
            return  # refused before any request (a name Cloud Storage does not allow)
        url = media_url("http://127.0.0.1:4443", container, key)
        expected = f"/download/storage/v1/b/{container}/o/{quote(key, safe='')}"
    else:
        assert parse_az_location(location) == (container, key)
        url = blob_url("http://127.0.0.1:10000/acct", container, key)
        expected = f"/acct/{container}/{quote(key, safe='/~')}"
    assert _segments(httpx.URL(url).raw_path.decode("ascii").partition("?")[0]) == _segments(expected)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=st.sampled_from(["", "datasets/", "spaces/"]),
    repo=st.sampled_from(["org/repo", "org/data", "gpt2", "org", "other/repo"]),
    revision=st.sampled_from(["", "@main", "@v2", "@refs/pr/1", "@refs%2Fpr%2F1", "@.."]),
    path=PATHS,
)
def test_an_admitted_hf_location_is_split_and_requested_as_checked(prefix, repo, revision, path):
    location = f"hf://{prefix}{repo}{revision}/{path}"
    if not admitted(location):
        return
    checked = parse_hub(location)
    try:
        hub = parse_hf_location(location)  # the reader's own split
    except reader.LocationError:
        return  # refused before any request (a repository name the Hub does not allow)
    assert (hub.prefix, hub.repo_id, hub.revision, hub.path) == (
        checked.prefix, checked.repo_id, checked.revision, checked.path,
    )  # fmt: skip
    url = hub.url("http://127.0.0.1:7000")
    expected = f"/{hub.prefix}{hub.repo_id}/resolve/{quote(hub.revision, safe='')}/{quote(hub.path)}"
    assert _segments(httpx.URL(url).raw_path.decode("ascii")) == _segments(expected)  # nothing resolved away
