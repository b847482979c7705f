"""Where the deployment files live (deploy/kubernetes/ and its base), and the nginx rendering
arguments the deployment tests share."""

from __future__ import annotations

from testing.paths import REPO

KUBERNETES = REPO / "deploy" / "kubernetes"
BASE = KUBERNETES / "base"

RENDER_ARGS = {
    "replica_a": "127.0.0.1:10001",
    "replica_b": "127.0.0.1:10002",
    "port": 10000,
    "cache_dir": "/some/dir/cache",
    "pid_file": "/some/dir/nginx.pid",
}
