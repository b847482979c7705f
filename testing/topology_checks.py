"""Checks of the deployment topology (SeaweedFS -> replicas -> nginx) that hold both natively
(tests/test_topology.py) and in containers (tests/test_image.py). Each takes an httpx client on nginx
whose default archive (the first) is layouts.pt2."""

from __future__ import annotations

import pathlib
from urllib.parse import quote

import numpy as np
import pytest

import reader
from testing.checks import run
from testing.paths import ARCHIVES
from testing.zipbytes import write_pt2

BIG_SHAPE = (768, 1024)  # 3 MiB of float32: several 1 MiB nginx slices


@pytest.fixture(scope="module")
def big_archive(tmp_path_factory) -> pathlib.Path:
    """One 3 MiB float32 tensor `big.weight`: several of nginx's 1 MiB slices."""
    path = tmp_path_factory.mktemp("topology") / "big.pt2"
    data = np.random.default_rng(3).standard_normal(BIG_SHAPE, dtype=np.float32).tobytes()
    write_pt2(path, {"big.weight": (7, list(BIG_SHAPE), data)})
    return path


async def all_bytes(location, order: str) -> dict[str, bytes]:
    """Every readable tensor's bytes as the library reads them."""
    async with reader.open_archive(location) as ar:
        return {t.name: await ar.read(t.name, order=order) for t in ar.tensors() if t.readable}


def data_url(name: str, archive: str | None = None) -> str:
    """The unversioned /data path of a tensor (of `archive`, else the default one)."""
    prefix = f"/archives/{archive}" if archive else ""
    return f"{prefix}/tensors/{quote(name, safe='')}/data"


def check_every_tensor_through_nginx(client) -> None:
    expected = run(all_bytes(ARCHIVES / "layouts.pt2", "default"))
    assert len(expected) > 5
    for name, data in expected.items():
        response = client.get(data_url(name))  # the default archive is the first one: layouts
        assert response.status_code == 200, (name, response.text)
        assert response.content == data, name
        # unversioned: revalidated by clients, not cached by nginx
        assert response.headers["cache-control"] == "no-cache" and "x-cache-status" not in response.headers
        pinned = client.get(response.headers["content-location"])
        assert pinned.status_code == 200 and pinned.content == data, name
        # an empty tensor cannot answer a slice's Range (416): nginx fetches it unsliced, uncached
        assert pinned.headers["x-cache-status"] in ({"MISS", "HIT"} if data else {"BYPASS"}), name
    listing = client.get("/tensors").json()
    assert listing["archive"] == "layouts" and {t["name"] for t in listing["tensors"]} >= set(expected)


def check_multi_slice_tensor_and_range_requests_hit_the_cache(client, big_archive: pathlib.Path) -> None:
    """`big_archive` (the `big_archive` fixture's file) is served as archive `big`."""
    expected = run(all_bytes(big_archive, "default"))["big.weight"]
    first = client.get(data_url("big.weight", archive="big"))
    assert first.status_code == 200 and first.content == expected
    url = first.headers["content-location"]  # the versioned URL: cacheable for good
    assert "@" in url
    assert client.get(url).content == expected
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
    data = run(all_bytes(ARCHIVES / "layouts.pt2", "contiguous"))[name]
    pinned = client.head(data_url(name) + "?order=contiguous").headers["content-location"]
    tail = [client.get(pinned, headers={"Range": "bytes=-100"}) for _ in range(2)]
    assert [r.status_code for r in tail] == [206, 206]
    assert all(r.content == data[-100:] for r in tail)
    assert [r.headers["x-cache-status"] for r in tail] == ["MISS", "HIT"]


def check_requests_survive_a_killed_replica(client, kill_one_replica) -> None:
    """`kill_one_replica()` SIGKILLs one of the two replicas and returns once it is dead."""
    # earlier tests may have had a replica answer 503 (an archive update), which nginx counts
    # against it for fail_timeout (5 s); with that one marked down and the other killed, nginx
    # would have no live upstream. Start from both replicas in good standing.
    import time

    time.sleep(5.5)
    kill_one_replica()
    expected = run(all_bytes(ARCHIVES / "layouts.pt2", "contiguous"))
    # new URLs (order=contiguous, not cached yet): every one has to reach a live replica
    for _ in range(2):
        for name, data in expected.items():
            response = client.get(data_url(name) + "?order=contiguous")
            assert response.status_code == 200, (name, response.status_code, response.text)
            assert response.content == data
        assert client.get("/tensors").status_code == 200
        assert client.get("/healthz").status_code == 200
