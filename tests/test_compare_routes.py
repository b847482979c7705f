"""GET /archives/{a}/compare/{b} and its per-tensor heat maps: statuses, ETags, 304s, caching."""

from __future__ import annotations

import asyncio
import shutil

import numpy as np
import pytest

from testing.paths import ARCHIVES
from testing.service import in_process, make_app
from testing.torch_oracle import needs_torch
from testing.versioned_archives import CHANGED, write_version
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.unit

FLOAT32 = 7


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory):
    pytest.importorskip("torch", reason="torch writes the two archive versions")
    out = tmp_path_factory.mktemp("versions")
    return write_version(out / "v1" / "net.pt2", 1), write_version(out / "v2" / "net.pt2", 2)


def deploy(source, target) -> None:
    staging = target.with_name(target.name + ".new")
    shutil.copy2(source, staging)
    staging.replace(target)


@pytest.fixture
def pair(tmp_path):
    """Two small archives: `w.a` changed in one element, `w.b` the same, `w.c` retyped."""
    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    y = x.copy()
    y[5, 7] += 100
    pair_of = x[0, :2]
    same = (FLOAT32, [2], pair_of.tobytes())
    write_pt2(tmp_path / "a.pt2", {"w.a": (FLOAT32, [64, 32], x.tobytes()), "w.b": same, "w.c": same})
    retyped = (8, [2], pair_of.astype(np.float64).tobytes())
    write_pt2(tmp_path / "b.pt2", {"w.a": (FLOAT32, [64, 32], y.tobytes()), "w.b": same, "w.c": retyped})
    return (
        [f"old={tmp_path / 'a.pt2'}", f"new={tmp_path / 'b.pt2'}", f"layouts={ARCHIVES / 'layouts.pt2'}"],
        x,
        y,
    )


async def test_two_archives_compared_with_etag_and_304(pair) -> None:
    specs, _, _ = pair
    async with in_process(make_app(specs)) as client:
        response = await client.get("/archives/old/compare/new")
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["a"]["archive"] == "old" and body["b"]["archive"] == "new"
        status = {t["name"]: t["status"] for t in body["tensors"]}
        assert status == {"w.a": "changed", "w.b": "same", "w.c": "retyped"}
        assert body["summary"]["counts"]["changed"] == 1 and not body["summary"]["identical"]
        changed = next(t for t in body["tensors"] if t["name"] == "w.a")
        assert changed["figures"]["max_abs_diff"] == 100.0 and changed["figures"]["elements_differ"] == 1
        assert response.headers["cache-control"] == "no-cache"
        etag = response.headers["etag"]
        assert etag.startswith('"')  # strong
        again = await client.get("/archives/old/compare/new", headers={"if-none-match": etag})
        assert again.status_code == 304
        filtered = (await client.get("/archives/old/compare/new", params={"prefix": "w.b"})).json()
        assert [t["name"] for t in filtered["tensors"]] == ["w.b"] and filtered["summary"]["identical"]
        same = await client.get("/archives/layouts/compare/layouts")
        assert same.json()["summary"]["identical"] is True


async def test_tensor_difference_heat_maps(pair) -> None:
    specs, _, _ = pair
    async with in_process(make_app(specs)) as client:
        response = await client.get("/archives/old/compare/new/tensors/w.a")
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["sampled"] is False and body["sizes"] == [64, 32]
        maps = body["heatmaps"]
        assert maps["a"]["rows"] == 64 and maps["difference"]["rows"] == 64
        # a - b: -100 at (5, 7), averaged into the one block (of 64 x 32: one element a block) holding it
        assert maps["difference"]["min"] == -100 and maps["difference"]["max"] == 0
        flat = np.array(maps["difference"]["values"], dtype=float)
        assert np.count_nonzero(flat) == 1
        retyped = await client.get("/archives/old/compare/new/tensors/w.c")
        assert retyped.status_code == 422 and retyped.json()["error"]["code"]


async def test_errors_are_json_404(pair) -> None:
    specs, _, _ = pair
    async with in_process(make_app(specs)) as client:
        for path in (
            "/archives/nope/compare/new",
            "/archives/old/compare/nope",
            "/archives/old/compare/new/tensors/missing",
            "/archives/old@0000/compare/new",
        ):
            response = await client.get(path)
            assert response.status_code == 404, (path, response.text)
            assert set(response.json()["error"]) >= {"code", "message"}
        bad_model = await client.get("/archives/old/compare/new", params={"model": "nope"})
        assert bad_model.status_code == 404


@needs_torch
async def test_two_versions_are_immutable_and_the_old_one_goes(two_versions, tmp_path) -> None:
    first, second = two_versions
    path = tmp_path / "net.pt2"
    deploy(first, path)
    app = make_app([f"net={path}"], version_grace_seconds=5.0)
    async with in_process(app) as client:
        v1 = (await client.get("/archives")).json()["archives"][0]["version"]
        deploy(second, path)
        await app.state.registry.reopen("net", stale=app.state.registry.slot("net").archive)
        v2 = (await client.get("/archives")).json()["archives"][0]["version"]
        url = f"/archives/net@{v1}/compare/net@{v2}"
        response = await client.get(url)
        assert response.status_code == 200, response.text
        assert response.headers["cache-control"] == "public, max-age=31536000, immutable"
        body = response.json()
        assert {t["name"] for t in body["tensors"] if t["status"] == "changed"} == set(CHANGED)
        assert body["summary"]["counts"]["same"] == len(body["tensors"]) - len(CHANGED)
        assert (await client.get(url, headers={"if-none-match": response.headers["etag"]})).status_code == 304
        credentialed = await client.get(url, headers={"authorization": "Bearer x"})
        assert credentialed.headers["cache-control"] == "private, max-age=31536000, immutable"
        half = await client.get(f"/archives/net@{v1}/compare/net")
        assert half.headers["cache-control"] == "no-cache" and half.json()["tensors"] == body["tensors"]
        await asyncio.sleep(5.5)
        gone = await client.get(url)
        assert gone.status_code == 410 and gone.json()["error"]["code"] == "version_gone"


@pytest.mark.parametrize("name", ["custom", "symbolic"])
async def test_a_tensor_without_bytes_is_refused_not_compared(name) -> None:
    """A custom object (no dtype, no sizes) and a symbolic-size constant are 422 unsupported_payload,
    never a 500 or heat maps of a shape the archive does not fix."""
    async with in_process(make_app()) as client:
        response = await client.get(f"/archives/pickled/compare/pickled/tensors/{name}")
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "unsupported_payload"
