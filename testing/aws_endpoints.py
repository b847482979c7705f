"""The endpoints AWS credentials come from, served on loopback by the tests: a container credentials
endpoint (ECS / EKS Pod Identity), EC2 instance metadata with IMDSv2 tokens, STS
AssumeRoleWithWebIdentity and the SSO portal's GetRoleCredentials.

Each hands out what ``issue(role_arn)`` returns (temporary credentials moto's STS issued, so the moto
server checks the signatures made with them). The server checks what the real services check: the
container endpoint's Authorization token, IMDSv2's session token (PUT first, then GETs carrying it),
the web identity token, the SSO access token. ``requests`` records (method, path) of every request.

``hold()`` makes the next credentials request wait until ``release()``: a test that releases it from
a task on its event loop proves the request was made while that loop kept running.

(moto itself cannot answer an unsigned AssumeRoleWithWebIdentity once it checks signatures, so STS for
web identity is served here, with credentials from moto's AssumeRole.)
"""

from __future__ import annotations

import datetime
import json
import secrets
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

from testing.servers import HOST

CONTAINER_PATH = "/container-credentials"
IMDS_ROLE = "pt2serve-instance-role"
IMDS_CREDENTIALS = "/latest/meta-data/iam/security-credentials/"
SSO_PATH = "/federation/credentials"
# seconds a held request waits for release() before answering 500: less than botocore's 2 s timeout, so a
# client that blocks its event loop while it waits cannot release it in time
HOLD_TIMEOUT = 1.5


def expiring_in(seconds: float) -> str:
    """An ISO 8601 UTC expiry `seconds` from now, as AWS endpoints write it."""
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class CredentialEndpoints:
    """One threaded HTTP server on 127.0.0.1 answering all three protocols. ``with`` starts and stops it."""

    def __init__(self, issue: Callable[[str | None], dict[str, str]]) -> None:
        self.issue = issue
        self.container_token = secrets.token_hex(16)
        self.web_identity_token = secrets.token_hex(24)
        self.sso_token = secrets.token_hex(24)
        self.requests: list[tuple[str, str]] = []
        self.waiting = threading.Event()
        self.released_in_time: bool | None = None  # how the last hold ended
        self._gate = threading.Event()  # set: requests pass
        self._gate.set()
        self._hold_next = False
        self._imds_tokens: set[str] = set()
        self._server = ThreadingHTTPServer((HOST, 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.base = f"http://{HOST}:{self._server.server_address[1]}"

    def __enter__(self) -> CredentialEndpoints:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._gate.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    @property
    def container_url(self) -> str:
        return self.base + CONTAINER_PATH

    def hold(self) -> None:
        self.waiting.clear()
        self.released_in_time = None
        self._gate.clear()
        self._hold_next = True

    def release(self) -> None:
        self._gate.set()

    def count(self, path: str) -> int:
        return sum(1 for _, seen in self.requests if seen == path)

    # -- answers -----------------------------------------------------------------------------------

    def credentials(self, role_arn: str | None) -> dict[str, str] | None:
        """What `issue` hands out, after a hold (None: the hold was never released)."""
        if self._hold_next:
            self._hold_next = False
            self.waiting.set()
            self.released_in_time = self._gate.wait(HOLD_TIMEOUT)
            if not self.released_in_time:
                return None
        return self.issue(role_arn)

    def take_imds_token(self) -> str:
        token = secrets.token_hex(16)
        self._imds_tokens.add(token)
        return token

    def imds_token_valid(self, token: str | None) -> bool:
        return token in self._imds_tokens


def _handler(endpoints: CredentialEndpoints) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _answer(self, status: int, body: bytes | str, content_type: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else body
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:  # IMDSv2 session token
            endpoints.requests.append(("PUT", self.path))
            if self.path != "/latest/api/token" or not self.headers.get(
                "x-aws-ec2-metadata-token-ttl-seconds"
            ):
                self._answer(400, "")
                return
            self._answer(200, endpoints.take_imds_token(), "text/plain")

        def do_GET(self) -> None:
            endpoints.requests.append(("GET", self.path))
            if self.path.startswith(SSO_PATH + "?"):
                self._sso_credentials()
            elif self.path == CONTAINER_PATH:
                if self.headers.get("Authorization") != endpoints.container_token:
                    self._answer(403, '{"message": "bad authorization token"}')
                    return
                self._credentials(None, container=True)
            elif self.path.startswith(IMDS_CREDENTIALS):
                if not endpoints.imds_token_valid(self.headers.get("x-aws-ec2-metadata-token")):
                    self._answer(401, "")
                elif self.path == IMDS_CREDENTIALS:
                    self._answer(200, IMDS_ROLE, "text/plain")
                elif self.path == IMDS_CREDENTIALS + IMDS_ROLE:
                    self._credentials(None, container=False)
                else:
                    self._answer(404, "")
            else:
                self._answer(404, "")

        def do_POST(self) -> None:  # STS
            endpoints.requests.append(("POST", self.path))
            length = int(self.headers.get("Content-Length") or 0)
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            if form.get("Action") != "AssumeRoleWithWebIdentity":
                self._answer(400, _sts_error("InvalidAction", "only AssumeRoleWithWebIdentity"), "text/xml")
            elif form.get("WebIdentityToken") != endpoints.web_identity_token:
                self._answer(400, _sts_error("InvalidIdentityToken", "token refused"), "text/xml")
            else:
                issued = endpoints.credentials(form.get("RoleArn"))
                if issued is None:
                    self._answer(500, _sts_error("InternalFailure", "held"), "text/xml")
                else:
                    self._answer(200, _web_identity_answer(issued, form["RoleArn"]), "text/xml")

        def _sso_credentials(self) -> None:
            if self.headers.get("x-amz-sso_bearer_token") != endpoints.sso_token:
                self._answer(401, '{"message": "bad SSO access token"}')
                return
            issued = endpoints.credentials(None)
            if issued is None:
                self._answer(500, '{"message": "held and never released"}')
                return
            expiry = datetime.datetime.strptime(issued["Expiration"], "%Y-%m-%dT%H:%M:%SZ")
            role = {
                "accessKeyId": issued["AccessKeyId"],
                "secretAccessKey": issued["SecretAccessKey"],
                "sessionToken": issued.get("SessionToken"),
                "expiration": int(expiry.replace(tzinfo=datetime.UTC).timestamp() * 1000),
            }
            self._answer(200, json.dumps({"roleCredentials": role}))

        def _credentials(self, role_arn: str | None, *, container: bool) -> None:
            issued = endpoints.credentials(role_arn)
            if issued is None:
                self._answer(500, '{"message": "held and never released"}')
                return
            body = {
                "AccessKeyId": issued["AccessKeyId"],
                "SecretAccessKey": issued["SecretAccessKey"],
                "Token": issued.get("SessionToken"),
                "Expiration": issued["Expiration"],
            }
            if not container:
                body.update(Code="Success", Type="AWS-HMAC", LastUpdated=expiring_in(0))
            self._answer(200, json.dumps(body))

    return Handler


def _sts_error(code: str, message: str) -> str:
    return (
        '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>'
        f"<Code>{code}</Code><Message>{message}</Message></Error><RequestId>1</RequestId></ErrorResponse>"
    )


def _web_identity_answer(issued: dict[str, str], role_arn: str) -> str:
    return (
        '<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
        "<AssumeRoleWithWebIdentityResult><Credentials>"
        f"<AccessKeyId>{issued['AccessKeyId']}</AccessKeyId>"
        f"<SecretAccessKey>{issued['SecretAccessKey']}</SecretAccessKey>"
        f"<SessionToken>{issued['SessionToken']}</SessionToken>"
        f"<Expiration>{issued['Expiration']}</Expiration>"
        "</Credentials>"
        f"<AssumedRoleUser><Arn>{role_arn}/web</Arn><AssumedRoleId>AROA:web</AssumedRoleId></AssumedRoleUser>"
        "</AssumeRoleWithWebIdentityResult>"
        "<ResponseMetadata><RequestId>1</RequestId></ResponseMetadata>"
        "</AssumeRoleWithWebIdentityResponse>"
    )
