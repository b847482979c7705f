"""The caching policy of every GET route (app/caching.py, docs/edge-delivery.md), conditional
requests, content codings, and credentials kept out of shared caches; in process, through the app."""

from __future__ import annotations

import email.utils
import gzip
import urllib.parse
import zlib

import httpx
import pytest
import zstandard

from app.caching import IMMUTABLE, IMMUTABLE_PRIVATE, NO_STORE, NO_STORE_PATHS, REVALIDATE
from testing import versioned_archives
from testing.service import in_process, make_app
from testing.torch_oracle import needs_torch
from testing.versioned_archives import deploy

pytestmark = pytest.mark.unit

two_versions = versioned_archives.two_versions  # the fixture: two torch-written versions of one archive
TOKEN = "edge-token-7"
BEARER = {"authorization": f"Bearer {TOKEN}"}
OUTSIDE_THE_SCHEMA = [
    "/",
    "/favicon.ico",
    "/viewer/app.js",
    "/viewer/viewer.css",
    "/viewer/icon.svg",
    "/auth",
]
NAME = "blocks.1.weight"  # changed by version 2 (testing/versioned_archives.py)


def get_routes(app) -> list[str]:
    """Every GET route's template: the OpenAPI document's, and those kept out of it."""
    paths = [path for path, ops in app.openapi()["paths"].items() if "get" in ops]
    return paths + OUTSIDE_THE_SCHEMA


def concrete(template: str, archive: str) -> str:
    url = template.replace("{archive_id}", archive).replace("{name}", urllib.parse.quote(NAME, safe=""))
    return url + ("?path=/tensors" if url == "/sign" else "")


def expected_policy(template: str, archive: str) -> str:
    if template in NO_STORE_PATHS:
        return NO_STORE
    if "{archive_id}" in template and "@" in archive:
        return IMMUTABLE
    return REVALIDATE


async def _version(client) -> str:
    return (await client.get("/archives")).json()["archives"][0]["version"]


@needs_torch
async def test_every_get_route_answers_its_policy_with_a_validator_and_a_304(two_versions, tmp_path) -> None:
    path = tmp_path / "net.pt2"
    deploy(two_versions[0], path)
    app = make_app([f"net={path}"])
    async with in_process(app) as client:
        pinned = f"net@{await _version(client)}"
        checked = 0
        for template in get_routes(app):
            for archive in ("net", pinned) if "{archive_id}" in template else ("net",):
                url = concrete(template, archive)
                response = await client.get(url)
                policy = response.headers.get("cache-control")
                if response.status_code != 200:  # executorch files, /sign (no token), /auth (no token): 204
                    assert response.status_code in (204, 404), (url, response.status_code, response.text)
                    assert "public" not in (policy or ""), url
                    continue
                assert policy == expected_policy(template, archive), url
                if policy == NO_STORE:
                    continue
                etag = response.headers["etag"]  # every cacheable 200 has a validator
                again = await client.get(url, headers={"if-none-match": etag})
                assert again.status_code == 304 and again.content == b"", url
                assert again.headers["etag"] == etag and again.headers["cache-control"] == policy, url
                other = await client.get(url, headers={"if-none-match": '"something-else"'})
                assert other.status_code == 200, url
                if "last-modified" in response.headers:
                    since = {"if-modified-since": response.headers["last-modified"]}
                    assert (await client.get(url, headers=since)).status_code == 304, url
                    earlier = email.utils.formatdate(0, usegmt=True)
                    assert (await client.get(url, headers={"if-modified-since": earlier})).status_code == 200
                checked += 1
        assert checked >= 25


@needs_torch
async def test_unversioned_answers_follow_an_update_and_versioned_ones_never_change(
    two_versions, tmp_path
) -> None:
    path = tmp_path / "net.pt2"
    deploy(two_versions[0], path)
    app = make_app([f"net={path}"], version_grace_seconds=3600)
    quoted = urllib.parse.quote(NAME, safe="")
    tails = ["/tensors", "/manifest", "/graph", f"/tensors/{quoted}/layout", f"/tensors/{quoted}/stats"]
    async with in_process(app) as client:
        old = await _version(client)

        async def answers(prefix: str) -> dict[str, tuple[str, bytes]]:
            got = {}
            for tail in [*tails, f"/tensors/{quoted}/data"]:
                response = await client.get(prefix + tail)
                assert response.status_code == 200, (prefix + tail, response.text)
                got[tail] = (response.headers["etag"], response.content)
            return got

        before = await answers("/archives/net")
        pinned_before = await answers(f"/archives/net@{old}")
        listing_before = await client.get("/archives")
        deploy(two_versions[1], path)
        await app.state.registry.reopen("net", stale=app.state.registry.slot("net").archive)
        assert await _version(client) != old
        after = await answers("/archives/net")
        for tail in [*tails, f"/tensors/{quoted}/data"]:
            assert after[tail][0] != before[tail][0], tail  # a new validator: a revalidating cache refetches
            if (
                tail != "/graph"
            ):  # the graph's text is the same (only weights changed); its tag names the version
                assert after[tail][1] != before[tail][1], tail
            response = await client.get("/archives/net" + tail, headers={"if-none-match": before[tail][0]})
            assert response.status_code == 200, tail
        listing = await client.get("/archives", headers={"if-none-match": listing_before.headers["etag"]})
        assert listing.status_code == 200 and listing.json() != listing_before.json()
        assert (
            await answers(f"/archives/net@{old}") == pinned_before
        )  # the old version: same bytes, same tags


async def _raw(client, url: str, headers: dict[str, str]) -> tuple[httpx.Response, bytes]:
    async with client.stream("GET", url, headers=headers) as response:
        return response, b"".join([piece async for piece in response.aiter_raw()])


DECODERS = {
    "gzip": gzip.decompress,
    "zstd": lambda body: zstandard.ZstdDecompressor().decompressobj().decompress(body),
}


async def test_text_bodies_come_in_each_coding_with_their_own_etag() -> None:
    async with in_process(make_app()) as client:
        for url in (
            "/archives/layouts/manifest",
            "/tensors",
            "/graph",
            "/",
            "/viewer/app.js",
            "/viewer/viewer.css",
        ):
            identity, plain = await _raw(client, url, {"accept-encoding": "identity"})
            assert identity.status_code == 200 and "content-encoding" not in identity.headers, url
            assert len(plain) >= 1024, url
            tags = {identity.headers["etag"]}
            for coding, decode in DECODERS.items():
                response, body = await _raw(client, url, {"accept-encoding": f"br, {coding};q=0.9, *;q=0"})
                assert response.headers["content-encoding"] == coding, url
                assert "accept-encoding" in response.headers["vary"].lower(), url
                assert decode(body) == plain, (url, coding)
                assert len(body) < len(plain) / 2, (url, coding)
                tags.add(response.headers["etag"])
                again = await client.get(
                    url, headers={"accept-encoding": coding, "if-none-match": response.headers["etag"]}
                )
                assert again.status_code == 304 and again.headers["etag"] == response.headers["etag"], url
                # the identity representation's tag does not validate the encoded one, nor the reverse
                crossed = await client.get(
                    url, headers={"accept-encoding": coding, "if-none-match": identity.headers["etag"]}
                )
                assert crossed.status_code == 200, url
            assert len(tags) == 3, (url, tags)
        # zstd preferred when both are equally welcome; q=0 refuses a coding
        assert (await client.get("/tensors", headers={"accept-encoding": "gzip, zstd"})).headers[
            "content-encoding"
        ] == "zstd"
        refused = await client.get("/tensors", headers={"accept-encoding": "zstd;q=0, gzip"})
        assert refused.headers["content-encoding"] == "gzip"


async def test_tensor_bytes_and_ranges_are_never_encoded() -> None:
    async with in_process(make_app()) as client:
        whole = await client.get("/tensors/conv.weight/data", headers={"accept-encoding": "identity"})
        for headers in ({}, {"range": "bytes=4-1000"}):
            response, body = await _raw(
                client, "/tensors/conv.weight/data", {"accept-encoding": "gzip, zstd", **headers}
            )
            assert "content-encoding" not in response.headers
            assert body == (whole.content[4:1001] if headers else whole.content)
        bundle, body = await _raw(client, "/archives/layouts/safetensors", {"accept-encoding": "gzip, zstd"})
        assert bundle.status_code == 200 and "content-encoding" not in bundle.headers
        assert int(bundle.headers["content-length"]) == len(body)


async def test_the_graph_streams_the_same_json_in_every_coding() -> None:
    async with in_process(make_app()) as client:
        plain = await client.get("/graph", headers={"accept-encoding": "identity"})
        assert "content-length" not in plain.headers  # streamed, not held whole
        graph = plain.json()
        assert graph["archive"] == "layouts" and graph["nodes"]
        for coding in DECODERS:
            response = await client.get("/graph", headers={"accept-encoding": coding})
            assert response.json() == graph  # httpx decodes both codings


async def test_credentialed_requests_are_never_public() -> None:
    async with in_process(make_app(api_token=TOKEN)) as client:
        layout = await client.get("/tensors/conv.weight/layout", headers=BEARER)
        data_url = layout.json()["data_url"]
        pinned_layout = data_url.replace("/data?", "/layout?")
        for url in (data_url, pinned_layout, data_url.split("/tensors/")[0] + "/manifest"):
            response = await client.get(url, headers=BEARER)
            assert response.status_code == 200 and response.headers["cache-control"] == IMMUTABLE_PRIVATE, url
            signed = (await client.get("/sign", params={"path": url}, headers=BEARER)).json()["url"]
            response = await client.get(signed)
            assert response.status_code == 200 and response.headers["cache-control"] == IMMUTABLE_PRIVATE, url
        for url in ("/tensors", "/archives", "/graph"):
            response = await client.get(url, headers=BEARER)
            assert response.headers["cache-control"] == REVALIDATE, url
    async with in_process(make_app()) as client:  # without a token: shared caches may keep it
        data_url = (await client.get("/tensors/conv.weight/layout")).json()["data_url"]
        assert (await client.get(data_url)).headers["cache-control"] == IMMUTABLE


async def test_the_auth_check_an_edge_proxy_asks() -> None:
    async with in_process(make_app(api_token=TOKEN)) as client:
        data_url = (await client.get("/tensors/conv.weight/layout", headers=BEARER)).json()["data_url"]

        async def check(uri: str, headers: dict[str, str] | None = None) -> int:
            answer = await client.get("/auth", headers={"x-original-uri": uri, **(headers or {})})
            assert answer.headers["cache-control"] == NO_STORE
            return answer.status_code

        assert await check(data_url, BEARER) == 204
        assert await check(data_url) == 401
        assert await check(data_url, {"authorization": "Bearer wrong"}) == 401
        signed = (await client.get("/sign", params={"path": data_url, "ttl": 60}, headers=BEARER)).json()[
            "url"
        ]
        assert await check(signed) == 204
        assert await check(signed.replace("exp=", "exp=1")) == 403  # any change breaks the signature
        other = signed.replace("conv.weight", "fc.weight")
        assert await check(other) == 403  # a signature is for one path
        assert await check("/viewer/app.js") == 204  # the page shell is open
    async with in_process(make_app()) as client:  # no token: everything passes
        assert (await client.get("/auth", headers={"x-original-uri": "/tensors"})).status_code == 204


def test_a_ten_thousand_node_graph_is_never_held_whole_as_text() -> None:
    """The graph's JSON goes out in pieces of NODES_PER_PIECE nodes, encoded as it goes: the memory
    it takes beyond the graph itself is a piece and the encoder's state, whatever the graph's size."""
    import tracemalloc

    import orjson

    from app import encoding
    from app.routes.graph import NODES_PER_PIECE, graph_json

    def graph(count: int) -> dict:
        nodes = [
            {"name": f"linear_{i}", "op": "call_function", "target": "aten.linear.default",
             "inputs": [{"name": "input", "tensors": [f"linear_{i - 1}"]}], "outputs": [f"linear_{i}"]}
            for i in range(count)
        ]  # fmt: skip
        return {"model": "model", "nodes": nodes, "inputs": [], "outputs": [f"linear_{count - 1}"]}

    graphs = {count: graph(count) for count in (10_000, 30_000)}
    texts = {count: b"".join(graph_json("big", dict(g))) for count, g in graphs.items()}
    assert orjson.loads(texts[10_000]) == orjson.loads(orjson.dumps({"archive": "big", **graphs[10_000]}))
    for coding in (encoding.IDENTITY, encoding.GZIP, encoding.ZSTD):
        peaks = {}
        for count, source in graphs.items():
            pieces = []
            tracemalloc.start()
            try:
                for piece in encoding.stream(graph_json("big", dict(source)), coding):
                    pieces.append(len(piece))  # the sizes only: what the server sends is gone
                peaks[count] = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert len(pieces) >= count // NODES_PER_PIECE or coding != encoding.IDENTITY
        assert peaks[30_000] < len(texts[30_000]) / 4, (coding, peaks, len(texts[30_000]))
        assert peaks[30_000] < 1.25 * peaks[10_000] + 65536, (coding, peaks)  # flat, not proportional
    whole = b"".join(encoding.stream(graph_json("big", graph(1000)), encoding.GZIP))
    assert orjson.loads(zlib.decompress(whole, 31)) == orjson.loads(b"".join(graph_json("big", graph(1000))))
