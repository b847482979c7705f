"""Deployment files checked by running them: deploy/init-s3.sh through sh -n, the rendered nginx.conf
through nginx (no Docker engine needed). The checks that only read them are in test_deploy_rules.py."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys

import pytest

from testing.deploy_files import RENDER_ARGS
from testing.paths import REPO

sys.path.insert(0, str(REPO / "scripts"))
import topology

pytestmark = pytest.mark.emulator


def test_init_script_is_valid_shell():
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no sh")
    subprocess.run([sh, "-n", str(REPO / "deploy" / "init-s3.sh")], check=True)


def test_nginx_accepts_the_rendered_config(tmp_path):
    from testing.provision import ensure_nginx

    nginx = ensure_nginx()  # installed when missing, not skipped
    tmp_path.chmod(0o755)
    (tmp_path / "cache").mkdir()
    conf = tmp_path / "nginx.conf"
    args = {**RENDER_ARGS, "cache_dir": str(tmp_path / "cache"), "pid_file": str(tmp_path / "nginx.pid")}
    conf.write_text(topology.render_nginx_conf(topology.NGINX_CONF.read_text(), **args))
    command = [nginx, "-t", "-p", str(tmp_path), "-c", str(conf), "-e", "stderr"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, f"{shlex.join(command)}\n{result.stderr}"
    assert "test is successful" in result.stderr
