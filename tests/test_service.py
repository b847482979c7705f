"""The HTTP API in process (httpx's ASGI transport): routes, HTTP semantics, formats, errors, safety."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

import reader
from reader.formats.npy import npy_descr
from testing.paths import ARCHIVES
from testing.service import in_process, make_app
from testing.torch_oracle import needs_torch

pytestmark = pytest.mark.unit


@pytest.fixture
async def client():
    async with in_process(make_app()) as client:
        yield client


def _error(response) -> dict:
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    return body["error"]


def layout_only(layout: dict) -> dict:
    """The layout JSON without what the service adds (the version and the versioned data URL)."""
    return {key: value for key, value in layout.items() if key not in ("archive_version", "data_url")}


async def test_health_archives_and_listing(client) -> None:
    assert (await client.get("/healthz")).json()["archives"]["layouts"] == "open"
    archives = (await client.get("/archives")).json()
    assert archives["default"] == "layouts"
    assert [a["id"] for a in archives["archives"]] == ["layouts", "dtypes", "two", "pickled", "deflate"]
    listing = (await client.get("/tensors")).json()
    assert listing["archive"] == "layouts" and listing["models"] == ["model"]
    async with reader.open_archive(ARCHIVES / "layouts.pt2") as ar:
        assert [layout_only(t) for t in listing["tensors"]] == [t.to_dict() for t in ar.tensors()]
    assert all(t["archive_version"] == listing["version"] for t in listing["tensors"])
    constants = (await client.get("/tensors", params={"kind": "constant"})).json()["tensors"]
    assert {t["name"] for t in constants} == {"const", "nonpersistent"}
    views = (await client.get("/tensors", params={"prefix": "view_"})).json()["tensors"]
    assert {t["name"] for t in views} == {"view_a", "view_b"}
    two = (await client.get("/archives/two/tensors", params={"model": "encoder"})).json()
    assert {t["model"] for t in two["tensors"]} == {"encoder"}


@pytest.mark.parametrize("archive_id", ["layouts", "dtypes", "two", "deflate"])
async def test_every_tensor_over_http_equals_the_reader(client, archive_id: str) -> None:
    path = {"layouts": "layouts", "dtypes": "dtypes", "two": "two_models", "deflate": "many_deflate"}[
        archive_id
    ]
    async with reader.open_archive(ARCHIVES / f"{path}.pt2") as ar:
        for info in ar.tensors()[:120]:
            if not info.readable:
                continue
            for order in ("default", "contiguous"):
                url = f"/archives/{archive_id}/tensors/{info.name}/data"
                response = await client.get(url, params={"model": info.model, "order": order})
                assert response.status_code == 200
                assert response.content == await ar.read(info.name, model=info.model, order=order)
                assert response.headers["content-length"] == str(info.nbytes)
                assert response.headers["x-tensor-dtype"] == info.dtype
                assert response.headers["x-tensor-shape"] == ",".join(map(str, info.sizes))
                layout = await client.get(f"/archives/{archive_id}/tensors/{info.name}/layout",
                                          params={"model": info.model})  # fmt: skip
                assert layout_only(layout.json()) == info.to_dict()


async def test_data_headers(client) -> None:
    response = await client.get("/tensors/conv.weight/data")
    headers = response.headers
    assert headers["accept-ranges"] == "bytes"
    assert re.fullmatch(r'"[0-9a-f]{32}"', headers["etag"])
    assert headers["cache-control"] == "no-cache"  # unversioned: revalidate (tests/test_versions.py)
    assert headers["x-tensor-dim-order"] == "0,2,3,1"  # channels_last, memory order
    contiguous = await client.get("/tensors/conv.weight/data", params={"order": "contiguous"})
    assert contiguous.headers["x-tensor-dim-order"] == "0,1,2,3"
    assert contiguous.headers["etag"] != headers["etag"]
    assert (await client.get("/tensors/conv.weight/data")).headers["etag"] == headers["etag"]  # stable


async def test_ranges(client) -> None:
    whole = (await client.get("/tensors/transposed/data")).content
    size = len(whole)
    for header, (start, end) in {
        "bytes=0-0": (0, 1),
        "bytes=10-19": (10, 20),
        "bytes=-7": (size - 7, size),
        "bytes=90-": (90, size),
        f"bytes=5-{size + 100}": (5, size),
        "bytes=-100000": (0, size),
    }.items():
        response = await client.get("/tensors/transposed/data", headers={"Range": header})
        assert response.status_code == 206, header
        assert response.content == whole[start:end]
        assert response.headers["content-range"] == f"bytes {start}-{end - 1}/{size}"
        assert response.headers["content-length"] == str(end - start)
    for header in (f"bytes={size}-", f"bytes={size + 5}-{size + 9}", "bytes=-0"):
        response = await client.get("/tensors/transposed/data", headers={"Range": header})
        assert response.status_code == 416, header
        assert response.headers["content-range"] == f"bytes */{size}"
        _error(response)
    for header in ("bytes=9-3", "items=0-4", "bytes=x-y", "bytes=" + ",".join(f"{i}-{i}" for i in range(40))):
        response = await client.get("/tensors/transposed/data", headers={"Range": header})
        assert response.status_code == 200 and response.content == whole, header


async def test_multipart_byteranges(client) -> None:
    whole = (await client.get("/tensors/transposed/data")).content
    response = await client.get("/tensors/transposed/data", headers={"Range": "bytes=0-3,10-19,-4"})
    assert response.status_code == 206
    kind, _, boundary = response.headers["content-type"].partition("; boundary=")
    assert kind == "multipart/byteranges"
    assert int(response.headers["content-length"]) == len(response.content)
    parts = response.content.split(f"--{boundary}".encode())[1:-1]
    got = []
    for part in parts:
        head, _, body = part.partition(b"\r\n\r\n")
        match = re.search(rb"content-range: bytes (\d+)-(\d+)/(\d+)", head)
        got.append((int(match.group(1)), body.removesuffix(b"\r\n")))
    assert got == [(0, whole[0:4]), (10, whole[10:20]), (len(whole) - 4, whole[-4:])]


async def test_conditional_requests_and_head(client) -> None:
    first = await client.get("/tensors/view_b/data")
    etag = first.headers["etag"]
    not_modified = await client.get("/tensors/view_b/data", headers={"If-None-Match": etag})
    assert not_modified.status_code == 304 and not_modified.content == b""
    assert not_modified.headers["etag"] == etag
    assert (await client.get("/tensors/view_b/data", headers={"If-None-Match": '"other"'})).status_code == 200
    ranged = await client.get("/tensors/view_b/data", headers={"Range": "bytes=4-7", "If-Range": etag})
    assert ranged.status_code == 206 and ranged.content == first.content[4:8]
    stale = await client.get("/tensors/view_b/data", headers={"Range": "bytes=4-7", "If-Range": '"old"'})
    assert stale.status_code == 200 and stale.content == first.content
    head = await client.head("/tensors/view_b/data")
    assert head.status_code == 200 and head.content == b""
    assert {k: v for k, v in head.headers.items() if k != "date"} == {
        k: v for k, v in first.headers.items() if k != "date"
    }
    head_range = await client.head("/tensors/view_b/data", headers={"Range": "bytes=0-3"})
    assert head_range.status_code == 206 and head_range.headers["content-length"] == "4"


async def test_npy_format(client) -> None:
    async with reader.open_archive(ARCHIVES / "dtypes.pt2") as ar:
        for info in ar.tensors():
            response = await client.get(
                f"/archives/dtypes/tensors/{info.name}/data", params={"format": "npy"}
            )
            assert response.status_code == 200, info.name
            loaded = np.load(io.BytesIO(response.content))
            assert loaded.dtype.str == npy_descr(info.dtype), info.dtype
            contiguous = await ar.read(info.name, order="contiguous")
            assert loaded.tobytes() == contiguous  # the same bytes, whatever the fallback dtype
            if info.dtype == "complex32":
                assert loaded.shape == (*info.sizes, 2)
            else:
                assert loaded.shape == info.sizes
            if info.dtype in ("float32", "int64", "bool", "complex64"):
                assert np.array_equal(loaded, await ar.read_numpy(info.name))
    npy = await client.get("/tensors/transposed/data", params={"format": "npy", "order": "default"})
    whole = np.load(io.BytesIO(npy.content))
    assert whole.shape == (6, 4)  # npy is always row-major whatever the order asked
    tail = await client.get(
        "/tensors/transposed/data", params={"format": "npy"}, headers={"Range": "bytes=-8"}
    )
    assert tail.content == npy.content[-8:]


@needs_torch
async def test_safetensors_bundle_loads_with_the_safetensors_package(client) -> None:
    from safetensors.torch import load

    for archive_id, path in (("dtypes", "dtypes.pt2"), ("layouts", "layouts.pt2")):
        response = await client.get(f"/archives/{archive_id}/safetensors")
        assert response.status_code == 200
        assert int(response.headers["content-length"]) == len(response.content)
        loaded = load(response.content)
        async with reader.open_archive(ARCHIVES / path) as ar:
            unwritable = ("complex32", "complex128", "float8_e8m0fnu")
            expected = {t.name for t in ar.tensors() if t.readable and t.dtype not in unwritable}
            assert set(loaded) == expected
            for name, tensor in loaded.items():
                raw = tensor.contiguous().reshape(-1).view(__import__("torch").uint8).numpy().tobytes()
                assert raw == await ar.read(name, order="contiguous")
        header_size = int.from_bytes(response.content[:8], "little")
        metadata = json.loads(response.content[8 : 8 + header_size])["__metadata__"]
        if archive_id == "dtypes":
            skipped = {"t_complex32", "t_complex128", "t_float8_e8m0fnu"}
            assert set(metadata["pt2serve.skipped"].split(",")) == skipped
    chosen = await client.get(
        "/archives/layouts/safetensors", params=[("name", "view_a"), ("name", "scalar")]
    )
    assert set(load(chosen.content)) == {"view_a", "scalar"}
    ranged = await client.get(
        "/archives/layouts/safetensors", params={"prefix": "lin"}, headers={"Range": "bytes=8-"}
    )
    full = await client.get("/archives/layouts/safetensors", params={"prefix": "lin"})
    assert ranged.status_code == 206 and ranged.content == full.content[8:]
    assert set(load(full.content)) == {"lin1.weight", "lin2.weight", "lin1.bias", "lin2.bias"}
    refused = await client.get("/archives/dtypes/safetensors", params={"name": "t_complex32"})
    assert refused.status_code == 422


async def test_errors_are_json_with_the_right_status(client) -> None:
    cases = [
        ("/tensors/conv.wieght/layout", {}, 404, "tensor_not_found"),
        ("/archives/nope/tensors", {}, 404, "archive_not_found"),
        ("/archives/two/tensors/proj.weight/data", {}, 404, "model_not_found"),
        ("/archives/two/tensors/proj.weight/data", {"model": "encodr"}, 404, "model_not_found"),
        ("/archives/pickled/tensors/sub/data", {}, 422, "unsupported_payload"),
        ("/archives/pickled/tensors/custom/data", {}, 422, "unsupported_payload"),
        ("/tensors/conv.weight/data", {"order": "fortran"}, 422, "invalid_request"),
        ("/tensors/conv.weight/data", {"format": "csv"}, 422, "invalid_request"),
        ("/no/such/route", {}, 404, "not_found"),
    ]
    for url, params, status, code in cases:
        response = await client.get(url, params=params)
        assert response.status_code == status, url
        assert _error(response)["code"] == code, url
    near = _error(await client.get("/tensors/conv.wieght/layout"))
    assert "conv.weight" in near["message"]
    not_acceptable = await client.get("/tensors/conv.weight/data", headers={"Accept": "text/html"})
    assert not_acceptable.status_code == 406 and _error(not_acceptable)["code"] == "not_acceptable"
    posted = await client.post("/tensors/conv.weight/data")
    assert posted.status_code == 405 and _error(posted)["code"] == "method_not_allowed"


async def test_names_with_slashes_and_percent_encoding(tmp_path) -> None:
    import zipfile

    source = zipfile.ZipFile(ARCHIVES / "layouts.pt2")
    target = tmp_path / "odd.pt2"
    with zipfile.ZipFile(target, "w") as out:
        for item in source.infolist():
            data = source.read(item)
            if item.filename.endswith("model_weights_config.json"):
                config = json.loads(data)
                config["config"]["blocks/0/odd name%20?"] = config["config"].pop("view_a")
                data = json.dumps(config).encode()
            out.writestr(item.filename, data)
    async with in_process(make_app([f"odd={target}"])) as client:
        quoted = "/tensors/blocks%2F0%2Fodd%20name%2520%3F/layout"
        response = await client.get(quoted)
        assert response.status_code == 200, response.text
        assert response.json()["name"] == "blocks/0/odd name%20?"
        data = await client.get("/tensors/blocks/0/odd%20name%2520%3F/data")
        assert data.status_code == 200 and len(data.content) == 20


async def test_bearer_token(tmp_path) -> None:
    async with in_process(make_app(api_token="s3cret")) as client:
        assert (await client.get("/healthz")).status_code == 200
        missing = await client.get("/tensors")
        assert missing.status_code == 401 and _error(missing)["code"] == "unauthorized"
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = await client.get("/tensors", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        ok = await client.get("/tensors/scalar/data", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and len(ok.content) == 4


async def test_cors_allowlist() -> None:
    async with in_process(make_app(cors_origins=("https://viewer.example",))) as client:
        preflight = await client.options(
            "/tensors/scalar/data",
            headers={"Origin": "https://viewer.example", "Access-Control-Request-Method": "GET",
                     "Access-Control-Request-Headers": "range"},
        )  # fmt: skip
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://viewer.example"
        simple = await client.get("/tensors/scalar/data", headers={"Origin": "https://viewer.example"})
        exposed = {h.strip().lower() for h in simple.headers["access-control-expose-headers"].split(",")}
        assert {"content-range", "etag", "content-length", "x-tensor-dtype", "x-tensor-shape"} <= exposed
        other = await client.get("/tensors/scalar/data", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers
    async with in_process(make_app()) as client:  # CORS is off by default
        plain = await client.get("/tensors/scalar/data", headers={"Origin": "https://viewer.example"})
        assert "access-control-allow-origin" not in plain.headers


async def test_metrics(client) -> None:
    await client.get("/tensors/scalar/data")
    await client.get("/tensors/nope/layout")
    text = (await client.get("/metrics")).text
    assert re.search(
        r'pt2serve_requests_total\{.*route="/tensors/\{name:path\}/data".*status="200"\} 1\.0', text
    )
    assert re.search(r'pt2serve_errors_total\{status="404"\} 1\.0', text)
    assert re.search(r"pt2serve_open_archives 5\.0", text)
    assert re.search(r'pt2serve_upstream_requests_total\{archive="layouts",purpose="open"\}', text)
    assert "pt2serve_response_bytes_total" in text


async def test_metrics_count_what_was_sent() -> None:
    """Bytes are the bodies' own, latency buckets are cumulative with `le` bounds, counts match."""
    app = make_app()
    async with in_process(app) as client:
        bodies = [await client.get(path) for path in ("/tensors/scalar/data", "/tensors/scalar/layout")]
        bodies.append(await client.get("/tensors/scalar/data", headers={"Range": "bytes=0-1"}))
        app.state.metrics.observe("/probe", 0.001)  # on a bound: counted in that bucket
        app.state.metrics.observe("/probe", 11.0)  # past the last bound: +Inf only
        families = {f.name: f for f in text_string_to_metric_families((await client.get("/metrics")).text)}
    sent = families["pt2serve_response_bytes"].samples[0].value
    assert sent == sum(len(response.content) for response in bodies)
    latency = families["pt2serve_request_seconds"].samples
    data = [s for s in latency if s.labels["route"] == "/tensors/{name:path}/data"]
    buckets = [s.value for s in data if s.name.endswith("_bucket")]
    assert buckets == sorted(buckets) and buckets[-1] == 2.0
    assert next(s.value for s in data if s.name.endswith("_count")) == 2.0
    probe = {s.name[len("pt2serve_request_seconds") :] + s.labels.get("le", ""): s.value
             for s in latency if s.labels["route"] == "/probe"}  # fmt: skip
    assert (probe["_bucket0.0005"], probe["_bucket0.001"], probe["_bucket10.0"]) == (0, 1, 1)
    assert (probe["_bucket+Inf"], probe["_count"], probe["_sum"]) == (2, 2, 11.001)
    statuses = {s.labels["status"]: s.value for s in families["pt2serve_requests"].samples
                if s.labels["route"] == "/tensors/{name:path}/data"}  # fmt: skip
    assert statuses == {"200": 1.0, "206": 1.0}


async def test_stream_cap_answers_503_with_retry_after() -> None:
    async with in_process(make_app(max_streams=0)) as client:
        busy = await client.get("/tensors/scalar/data")
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
        assert _error(busy)["code"] == "too_many_streams"
        assert (await client.head("/tensors/scalar/data")).status_code == 200  # no body, no slot
        assert (await client.get("/tensors/scalar/layout")).status_code == 200


async def test_an_archive_that_fails_to_open_is_reported_not_fatal(tmp_path) -> None:
    broken = tmp_path / "broken.pt2"
    broken.write_bytes(b"not a zip")
    async with in_process(make_app([f"ok={ARCHIVES / 'layouts.pt2'}", f"broken={broken}"])) as client:
        archives = {a["id"]: a for a in (await client.get("/archives")).json()["archives"]}
        assert archives["ok"]["status"] == "open"
        assert archives["broken"]["status"] == "error" and "ArchiveFormatError" in archives["broken"]["error"]
        response = await client.get("/archives/broken/tensors")
        assert response.status_code == 503 and _error(response)["code"] == "archive_unavailable"


async def test_archive_locations_never_show_secrets() -> None:
    from reader.sources import redact_location

    assert redact_location("https://user:pw@host/a/b.pt2?X-Amz-Signature=abc") == "https://host/a/b.pt2"
    assert redact_location("s3://bucket/key.pt2") == "s3://bucket/key.pt2"
    assert redact_location("/data/x.pt2") == "/data/x.pt2"


def test_app_state_attributes_follow_every_change() -> None:
    """app.state keeps its values as plain attributes too (read on every request): setting and
    deleting them by attribute or by key keeps both views the same."""
    state = make_app().state
    assert state.settings is state["settings"] and state.registry is state._state["registry"]
    state.extra = 1
    state["extra"] = 2
    assert (state.extra, state["extra"]) == (2, 2)
    del state["extra"]
    assert not hasattr(state, "extra") and "extra" not in state._state
    state["other"] = 3
    del state.other
    assert not hasattr(state, "other") and "other" not in state._state
