"""A remote store's differences are a small typed policy, and each rule of the sources is written once.

- Every store is `HttpSource` with a `StorePolicy` (policy.py): Cloud Storage's generation, the Hub's
  commit, Azure's refusals are answers of the policy, checked here against crafted answers through a
  real `Exchange` (no request is sent);
- one `Content-Range` parser (contentrange.py) for every reader of that header;
- one helper refreshes a credential under a lock (refresh.py), for S3, Cloud Storage and Azure;
- `ByteSource` knows no entries, and sources/ imports nothing from a layer above it;
- no class in sources/ is over 250 lines or 20 methods without a reason at its top.
"""

from __future__ import annotations

import ast
import asyncio
import pathlib
import re
from types import SimpleNamespace

import httpx
import pytest

from reader.archives.sharded.archive import _check_one_commit
from reader.errors import SourceChanged, SourceError
from reader.sources import ByteSource, ContentRange, HttpOptions, HttpSource, parse_content_range
from reader.sources.blob import BlobAuth, BlobPolicy
from reader.sources.exchange import Exchange
from reader.sources.gcs import GcsPolicy, Unsigned
from reader.sources.hf import HubFile, HubPolicy
from reader.sources.policy import StorePolicy
from reader.sources.refresh import Refreshing
from reader.versions import version_basis

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = ROOT / "reader" / "sources"
MEDIA = "https://storage.example/download/storage/v1/b/bkt/o/model.pt2?alt=media"


def _exchange(url: str, policy: StorePolicy) -> Exchange:
    """A real Exchange whose client never sends here (only crafted answers are checked)."""
    return Exchange(url, httpx.AsyncClient(), HttpOptions(), policy, "where")


def _answer(url: str, status: int, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, headers=headers, request=httpx.Request("GET", url))


# -- Content-Range -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("bytes 0-9/100", ContentRange(0, 9, 100)),
        ("  bytes 5-5/6 ", ContentRange(5, 5, 6)),
        (b"bytes 1-2/*", ContentRange(1, 2, None)),
        ("bytes */42", ContentRange(None, None, 42)),
        ("bytes 1-2", None),
        ("items 1-2/3", None),
        ("bytes -1-2/3", None),
        ("bytes \u0661-\u0662/\u0663", None),  # digits, but not ASCII ones
        (None, None),
    ],
)
def test_one_content_range_parser(value: str | bytes | None, parsed: ContentRange | None) -> None:
    assert parse_content_range(value) == parsed


def test_a_satisfied_range_lies_inside_the_object() -> None:
    assert ContentRange(0, 9, 10).satisfied
    assert not ContentRange(9, 8, 10).satisfied
    assert not ContentRange(0, 10, 10).satisfied
    assert not ContentRange(None, None, 10).satisfied
    assert not ContentRange(0, 9, None).satisfied


def test_no_other_module_parses_a_content_range() -> None:
    """A `bytes a-b/N` pattern anywhere but contentrange.py is a second copy of the rule."""
    pattern = re.compile(r"re\.compile\(\s*r?b?[\"'][^\"']*bytes \(")
    copies = [
        str(path.relative_to(ROOT))
        for package in ("reader", "app")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "contentrange.py" and pattern.search(path.read_text())
    ]
    assert copies == []


# -- the policies, through a real Exchange -----------------------------------------------------


def test_gcs_pins_the_generation_and_drops_the_etag() -> None:
    policy = GcsPolicy(Unsigned("none (STORAGE_EMULATOR_HOST=x)"))
    exchange = _exchange(MEDIA, policy)
    exchange.remember(_answer(MEDIA, 206, {"x-goog-generation": "17", "etag": '"e"'}))
    assert (policy.generation, exchange.etag, exchange.pin()) == ("17", None, {})
    assert exchange.read_url == f"{MEDIA}&generation=17" and policy.identity() == "generation:17"
    assert exchange.pinned()["generation"] == "17"
    with pytest.raises(SourceChanged, match="generation 17 is now 18"):
        exchange.check_same_object(_answer(MEDIA, 206, {"x-goog-generation": "18"}), None)


def test_gcs_refuses_an_answer_without_a_generation() -> None:
    exchange = _exchange(MEDIA, GcsPolicy(Unsigned("none")))
    with pytest.raises(SourceError, match="names no object generation"):
        exchange.remember(_answer(MEDIA, 206, {"etag": '"e"'}))


def test_gcs_refusals_name_the_credentials() -> None:
    exchange = _exchange(MEDIA, GcsPolicy(Unsigned("service account a@b from f.json")))
    with pytest.raises(SourceError, match=r"HTTP 403 \(access denied\); credentials: service account a@b"):
        exchange.check_status(_answer(MEDIA, 403), allow=(206,))
    with pytest.raises(SourceError) as refused:
        exchange.check_status(_answer(MEDIA, 400), allow=(206,))
    assert "credentials" not in str(refused.value)


def test_blob_opens_with_head_and_names_the_refused_credential() -> None:
    url = "https://acct.blob.core.windows.net/c/model.pt2"
    policy = BlobPolicy(BlobAuth("the SAS token from AZURE_STORAGE_SAS_TOKEN"))
    assert not policy.suffix_open and policy.multirange is False
    exchange = _exchange(url, policy)
    with pytest.raises(SourceError, match=r"HTTP 403 \(AuthenticationFailed\): Azure refused the SAS token"):
        exchange.check_status(_answer(url, 403, {"x-ms-error-code": "AuthenticationFailed"}), allow=(200,))
    with pytest.raises(SourceError, match=r"HTTP 404 \(BlobNotFound\): no such blob or container"):
        exchange.check_status(_answer(url, 404, {"x-ms-error-code": "BlobNotFound"}), allow=(200,))
    exchange.size = 10  # opened: a blob gone since
    with pytest.raises(SourceChanged):
        exchange.check_status(_answer(url, 404), allow=(206,))


def test_the_hub_pins_the_commit_and_explains_its_refusals() -> None:
    hub_file = HubFile("", "org/model", "main", "model.pt2")
    url = hub_file.url("https://hub.example")
    policy = HubPolicy(hub_file, "https://hub.example", has_token=False)
    exchange = _exchange(url, policy)
    commit = "a" * 40
    exchange.remember(_answer(url, 206, {"x-repo-commit": commit, "etag": '"t"'}))
    assert policy.commit == commit and f"/resolve/{commit}/" in exchange.read_url
    assert exchange.pin() == {}  # the commit in the URL pins the Hub's answers
    with pytest.raises(SourceError, match="org/model is gated: it needs a token"):
        exchange.check_status(_answer(url, 403, {"x-error-code": "GatedRepo"}), allow=(206,))
    exchange.read_url = "https://cdn.example/signed"
    assert exchange.pin() == {"If-Match": '"t"'}  # the CDN's object: pinned by its ETag


def test_plain_http_is_the_default_policy() -> None:
    url = "https://files.example/model.pt2"
    exchange = _exchange(url, StorePolicy())
    exchange.remember(_answer(url, 206, {"etag": '"v1"'}))
    assert exchange.pin() == {"If-Match": '"v1"'} and exchange.read_url == url
    assert exchange.pinned() == {"size": 0, "etag": '"v1"', "last_modified": None}
    with pytest.raises(SourceError, match=r"HTTP 403 \(access denied\)$"):
        exchange.check_status(_answer(url, 403), allow=(206,))


def test_an_archive_version_still_comes_from_the_validators() -> None:
    """reader.versions names a remote version by its strong ETag (or Last-Modified) and size, as the
    source's `etag` and `last_modified` say: the exchange keeps them, the source shows them."""
    url = "https://files.example/model.pt2"
    source = HttpSource(url, httpx.AsyncClient(), HttpOptions())
    source.exchange.remember(_answer(url, 206, {"etag": '"v1"', "last-modified": "Mon, 07 Dec 2026"}))
    source.exchange.size = 10
    assert (source.etag, source.last_modified, source.identity) == ('"v1"', "Mon, 07 Dec 2026", '"v1"')
    assert version_basis(source) == 'etag:"v1":10'
    gcs = HttpSource(MEDIA, httpx.AsyncClient(), HttpOptions(), policy=GcsPolicy(Unsigned("none")))
    gcs.exchange.remember(_answer(MEDIA, 206, {"etag": '"e"', "x-goog-generation": "5"}))
    assert version_basis(gcs) == "identity:generation:5"  # metadata-only changes move Google's ETag


def test_shards_of_the_hub_are_checked_for_one_commit() -> None:
    """A sharded checkpoint on the Hub refuses shards read at another commit than its index: the
    commit each source pinned is in its `pinned()`."""

    def hub_source(commit: str) -> HttpSource:
        hub_file = HubFile("", "org/model", "main", "model.safetensors.index.json")
        url = hub_file.url("https://hub.example")
        policy = HubPolicy(hub_file, "https://hub.example", has_token=False)
        source = HttpSource(url, httpx.AsyncClient(), HttpOptions(), location="hf://org/model", policy=policy)
        source.exchange.remember(_answer(url, 206, {"x-repo-commit": commit}))
        return source

    index = hub_source("a" * 40)
    _check_one_commit(index, {"one": SimpleNamespace(source=hub_source("a" * 40))})  # type: ignore[dict-item]
    with pytest.raises(SourceChanged, match="the revision moved while opening"):
        _check_one_commit(index, {"two": SimpleNamespace(source=hub_source("b" * 40))})  # type: ignore[dict-item]


# -- credential refresh ------------------------------------------------------------------------


async def test_concurrent_callers_share_one_refresh() -> None:
    refreshing = Refreshing()
    token = {"value": None}
    calls = 0

    async def refresh() -> None:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)  # the others arrive meanwhile
        token["value"] = "fresh"

    def due() -> bool:
        return token["value"] is None

    results = await asyncio.gather(*(refreshing.refresh_if_due(due, refresh) for _ in range(8)))
    assert calls == 1 and results.count(True) == 1 and token["value"] == "fresh"
    assert not await refreshing.refresh_if_due(due, refresh)


def test_one_refresh_helper_for_every_credential() -> None:
    """s3.py, gcs.py and azure.py refresh through refresh.py; no other lock guards a refresh."""
    for name in ("s3.py", "gcs.py", "azure.py"):
        text = (SOURCES / name).read_text()
        assert "Refreshing()" in text and "asyncio.Lock" not in text, name


# -- layers and sizes --------------------------------------------------------------------------


def test_a_byte_source_knows_no_entries() -> None:
    assert not hasattr(ByteSource, "needs_check") and not hasattr(ByteSource, "mark_verified")


def test_sources_import_nothing_from_the_layers_above() -> None:
    above = ("entries", "loading", "bodies", "archives", "cache", "pt2", "formats", "integrations")
    found = []
    for path in sorted(SOURCES.rglob("*.py")):
        package = list(path.relative_to(ROOT).parent.parts)  # reader, sources[, http1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                module = ".".join([*base, node.module or ""]).strip(".")
                if module.split(".")[:2] in (["reader", name] for name in above):
                    found.append(f"{path.relative_to(ROOT)}: {module}")
    assert found == []


def test_no_class_in_the_sources_is_over_the_bar() -> None:
    """At most 250 lines and 20 methods, or a paragraph at the top of its docstring saying why."""
    over = []
    for path in sorted(SOURCES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                methods = sum(isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) for item in node.body)
                reason = "must be bigger" in (ast.get_docstring(node) or "")
                if (lines > 250 or methods > 20) and not reason:
                    over.append(f"{path.name}: {node.name} ({lines} lines, {methods} methods)")
    assert over == []
