"""Deployment files read as text and YAML: docker-compose.yml, Dockerfile, .dockerignore, deploy/
(no Docker engine, no subprocess, no socket). The checks that run a shell or an image are in
test_deploy.py."""

from __future__ import annotations

import difflib
import json
import re
import sys

import pytest

from testing.deploy_files import RENDER_ARGS
from testing.dockerfile import DOCKERFILE, dockerfile_volumes
from testing.paths import REPO

sys.path.insert(0, str(REPO / "scripts"))
import topology

pytestmark = pytest.mark.unit


yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (pip install pyyaml)")


COMPOSE = REPO / "docker-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_services(compose):
    services = compose["services"]
    assert set(services) == {"seaweedfs", "init-s3", "pt2serve-a", "pt2serve-b", "nginx"}
    for name in ("pt2serve-a", "pt2serve-b"):
        replica = services[name]
        assert replica["build"] == "."
        env = replica["environment"]
        assert env["PT2SERVE_ARCHIVES"].split("=", 1)[1].startswith("s3://")
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"} <= set(env)
        assert replica["depends_on"]["init-s3"]["condition"] == "service_completed_successfully"
    # the replicas read the object the init service uploads
    init_env = services["init-s3"]["environment"]
    uploaded = f"s3://{init_env['S3_BUCKET']}/{init_env['S3_KEY']}"
    assert services["pt2serve-a"]["environment"]["PT2SERVE_ARCHIVES"].endswith(uploaded)
    assert any(v.endswith(":/etc/nginx/nginx.conf:ro") for v in services["nginx"]["volumes"])


def test_compose_references_existing_files(compose):
    referenced = []
    for service in compose["services"].values():
        build = service.get("build")
        if build:
            context = REPO / (build if isinstance(build, str) else build.get("context", "."))
            dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
            referenced.append(context / dockerfile)
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith((".", "/")):
                referenced.append(REPO / source)
            else:
                assert source in compose.get("volumes", {}), f"named volume {source!r} is not declared"
    assert referenced
    missing = [str(p) for p in referenced if not p.exists()]
    assert not missing, missing


def test_nginx_upstreams_are_compose_services(compose):
    conf = topology.NGINX_CONF.read_text()
    upstream = re.search(r"upstream pt2serve \{(.*?)\}", conf, re.S)
    assert upstream
    servers = re.findall(r"^\s*server\s+([\w.-]+):(\d+)", upstream.group(1), re.M)
    assert [host for host, _ in servers] == ["pt2serve-a", "pt2serve-b"]
    assert all(host in compose["services"] for host, _ in servers)
    assert "proxy_next_upstream error timeout http_502 http_503;" in conf
    assert "add_header X-Cache-Status $upstream_cache_status" in conf


def test_dockerfile():
    text = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM\s+(\S+)", text, re.M)
    # both stages on BASE_IMAGE, python:3.11-slim unless a build argument names another (a stand-in)
    assert stages == ["${BASE_IMAGE}", "${BASE_IMAGE}"], stages
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim$", text, re.M)
    assert re.search(r"^USER\s+(?!root\b|0\b)\S+", text, re.M), "the final stage must not run as root"
    assert 'CMD ["pt2serve", "serve", "--host", "0.0.0.0"]' in text
    joined = text.replace("\\\n", " ")  # continuation lines
    healthcheck = re.search(r"^HEALTHCHECK .*? CMD (\[.*\])$", joined, re.M)
    assert healthcheck and "/healthz" in healthcheck.group(1)
    command = json.loads(healthcheck.group(1))
    assert command[:2] == ["python", "-c"]
    compile(command[2], "<healthcheck>", "exec")  # a valid one-liner, stdlib only
    for source in re.findall(r"^COPY\s+(?!--from)(\S+)", text, re.M):
        assert (REPO / source).exists(), source
    ignored = (REPO / ".dockerignore").read_text().split()
    for source in re.findall(r"^COPY\s+(?!--from)(\S+)", text, re.M):
        assert f"!{source.rstrip('/')}" in ignored or f"!{source.rstrip('/')}/" in ignored, source


def test_the_image_runs_with_a_read_only_root_filesystem(compose):
    """Its writable paths are VOLUMEs (its WORKDIR among them), and compose runs both the replicas and
    nginx read-only with each of those paths (and nginx.conf's pid and cache folders) writable."""
    text = DOCKERFILE.read_text()
    volumes = dockerfile_volumes(text)
    workdir = re.findall(r"^WORKDIR\s+(\S+)", text, re.M)[-1]
    assert volumes and workdir in volumes, (volumes, workdir)
    services = compose["services"]
    for name in ("pt2serve-a", "pt2serve-b"):
        assert services[name]["read_only"] is True
        assert set(volumes) <= set(services[name]["tmpfs"]), services[name]
    nginx = services["nginx"]
    assert nginx["read_only"] is True
    writable = [*nginx["tmpfs"], *(v.split(":")[1] for v in nginx["volumes"] if not v.endswith(":ro"))]
    conf = topology.NGINX_CONF.read_text()
    pid_dir = re.search(r"^pid\s+(\S+);", conf, re.M).group(1).rsplit("/", 1)[0]
    cache_dirs = re.findall(r"(?:_temp_path|proxy_cache_path)\s+(\S+?);?\s", conf)
    for path in [pid_dir, *cache_dirs]:
        assert any(path == w or path.startswith(w.rstrip("/") + "/") for w in writable), (path, writable)


def _installs(text: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", text)  # a RUN's continuation lines are part of it
    return [line.strip() for line in joined.splitlines() if re.search(r"\bpip install\b", line)]


def test_dockerfile_installs_like_the_readme():
    """The image installs the project with `pip install` (its wheel), as the README's serve command does."""
    docker = [line for line in _installs(DOCKERFILE.read_text()) if line.startswith("RUN")]
    assert any(
        re.search(r'pip install (/wheels/\*\.whl|"\$\(ls /wheels/\*\.whl\)|\.)', line) for line in docker
    ), docker
    readme = (REPO / "README.md").read_text()
    # the README's shell lines that start the service (prose and comments mention it too)
    serve = [line.strip() for line in readme.splitlines() if re.search(r"&&\s*pt2serve serve", line)]
    assert serve, "the README lost its service command (a line like `pip install -e . && pt2serve serve`)"
    assert all(line.startswith("pip install ") for line in serve), serve


def test_rendering_changes_only_the_substituted_strings():
    original = topology.NGINX_CONF.read_text()
    rendered = topology.render_nginx_conf(original, **RENDER_ARGS)
    before, after = original.splitlines(), rendered.splitlines()
    assert len(before) == len(after)
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert changed
    for old, new in changed:
        literals = [lit for lit in topology.RUNTIME_SUBSTITUTIONS if lit in old]
        assert literals, f"line changed without a substitution: {old!r}"
        # undoing the substitutions on the new line gives back the old line exactly
        undone = new
        for literal in literals:
            undone = undone.replace(topology.RUNTIME_SUBSTITUTIONS[literal].format(**RENDER_ARGS), literal)
        assert undone == old, "".join(difflib.unified_diff([old], [new]))
    for literal in topology.RUNTIME_SUBSTITUTIONS:
        assert literal not in rendered
    with pytest.raises(ValueError, match="pt2serve-a"):
        topology.render_nginx_conf(original.replace("pt2serve-a:8000", "elsewhere:1"), **RENDER_ARGS)
