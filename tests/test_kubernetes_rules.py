"""deploy/kubernetes read as files, without a cluster or a subprocess: the kustomize copy of
deploy/nginx.conf is deploy/nginx.conf, and /healthz gates readiness until every archive has opened
(the app in-process). Rendering and checkov are in test_kubernetes.py."""

from __future__ import annotations

import sys

import pytest

from testing.deploy_files import BASE
from testing.paths import REPO

sys.path.insert(0, str(REPO / "scripts"))
import topology

pytestmark = pytest.mark.unit


def test_the_kustomize_copy_of_nginx_conf_is_deploy_nginx_conf():
    """kustomize reads no file outside its folder: base/nginx.conf is deploy/nginx.conf, byte for byte."""
    copy = BASE / "nginx.conf"
    assert copy.read_bytes() == topology.NGINX_CONF.read_bytes(), (
        "deploy/kubernetes/base/nginx.conf differs from deploy/nginx.conf: "
        "run `cp deploy/nginx.conf deploy/kubernetes/base/nginx.conf`"
    )


async def test_healthz_is_not_ready_until_every_archive_has_opened(tmp_path):
    """The readiness probe: 503 (a JSON error) while an archive has not opened, 200 once all have, and
    200 from then on, even when a later reopen fails (every replica sees the same source)."""
    from testing.paths import ARCHIVES
    from testing.service import in_process, make_app

    late = tmp_path / "late.pt2"
    late.write_bytes(b"not yet an archive")
    app = make_app([f"ok={ARCHIVES / 'layouts.pt2'}", f"late={late}"], retry_failed_after=0)
    async with in_process(app) as client:
        waiting = await client.get("/healthz")
        assert waiting.status_code == 503 and waiting.headers["retry-after"] == "5"
        error = waiting.json()["error"]
        assert (
            error["code"] == "not_ready"
            and "late (error)" in error["message"]
            and "ok" not in error["message"]
        )
        late.write_bytes((ARCHIVES / "layouts.pt2").read_bytes())
        assert (await client.get("/archives/late/tensors")).status_code == 200  # opens it
        ready = await client.get("/healthz")
        assert ready.status_code == 200 and ready.json() == {
            "status": "ok",
            "archives": {"ok": "open", "late": "open"},
        }
        # the archive changes into something unreadable: the reopen fails, the replica stays ready
        registry = app.state.registry
        late.write_bytes(b"broken again")
        await registry.reopen("late", stale=registry.slots["late"].archive)
        assert registry.slots["late"].status == "error"
        still = await client.get("/healthz")
        assert still.status_code == 200 and still.json()["archives"]["late"] == "error"


async def test_healthz_with_lazy_archives_is_ready_before_they_open():
    from testing.paths import ARCHIVES
    from testing.service import in_process, make_app

    async with in_process(make_app([f"ok={ARCHIVES / 'layouts.pt2'}"], lazy=True)) as client:
        response = await client.get("/healthz")
        assert response.status_code == 200 and response.json()["archives"] == {"ok": "pending"}
