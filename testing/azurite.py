"""Azurite (Microsoft's Azure Storage emulator, from npm) on loopback, for the az:// tests and bench.

``Azurite`` runs ``azurite-blob`` in memory on a free 127.0.0.1 port with the emulator's well-known
development account (``devstoreaccount1``), whose shared-key and SAS signatures Azurite checks. With
``tls=`` (a certificate and key, e.g. from ``trustme``) it speaks https, and ``oauth=True`` adds
``--oauth basic``: bearer tokens are accepted when their audience, issuer and lifetime fit
(Azurite does not check a token's signature). The process is stopped by its PID on ``stop()`` /
context exit, and at interpreter exit.

Blobs are written with azure-storage-blob (``pip install pt2serve[azure]``), as a user would.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import pathlib
import subprocess
import tempfile

from testing.provision import ensure_npm
from testing.servers import HOST, _ServerProcess, free_port, wait_listening

ACCOUNT = "devstoreaccount1"
# The emulator's published development key (the same in every Azurite and Storage Emulator).
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
START_TIMEOUT = 60.0


def azurite_binary() -> str:
    return ensure_npm("azurite", "azurite-blob")


class Azurite(_ServerProcess):
    """One in-memory Azurite blob service on loopback."""

    name = "Azurite"

    def __init__(self, *, tls: tuple[pathlib.Path, pathlib.Path] | None = None, oauth: bool = False) -> None:
        binary = azurite_binary()
        self.port = free_port()
        self._workspace = tempfile.TemporaryDirectory(prefix="pt2serve-azurite-")
        self.scheme = "https" if tls else "http"
        self.ca_file: str | None = None
        command = [binary, "--inMemoryPersistence", "--blobHost", HOST, "--blobPort", str(self.port),
                   "--skipApiVersionCheck", "--loose", "--disableTelemetry", "--silent"]  # fmt: skip
        if tls:
            command += ["--cert", str(tls[0]), "--key", str(tls[1])]
        if oauth:
            command += ["--oauth", "basic"]
        self._log = open(pathlib.Path(self._workspace.name, "azurite.log"), "wb")  # noqa: SIM115
        self.process = subprocess.Popen(  # in memory; the workspace (cwd) only gets stray files
            command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            cwd=self._workspace.name,
        )  # fmt: skip
        atexit.register(self.stop)
        try:
            wait_listening(self.port, self.process, "azurite-blob", START_TIMEOUT)
        except RuntimeError as exc:
            log = self.log_text().strip()
            self.stop()
            raise RuntimeError(f"{exc}: {log}") from None
        except BaseException:
            self.stop()
            raise

    @property
    def endpoint(self) -> str:
        """The blob service endpoint, path-style as Azurite addresses accounts."""
        return f"{self.scheme}://{HOST}:{self.port}/{ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return f"AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={self.endpoint};"

    def blob_url(self, container: str, blob: str) -> str:
        from urllib.parse import quote

        return f"{self.endpoint}/{container}/{quote(blob, safe='/~')}"

    def service(self):
        """An azure-storage-blob BlobServiceClient signed with the development key."""
        from azure.storage.blob import BlobServiceClient

        key = {"account_name": ACCOUNT, "account_key": ACCOUNT_KEY}
        extra = {"connection_verify": self.ca_file} if self.ca_file else {}
        return BlobServiceClient(self.endpoint, credential=key, **extra)

    def upload(self, container: str, blob: str, data: bytes) -> str:
        """Write (or replace) a blob, creating its container; returns the new ETag."""
        from azure.core.exceptions import ResourceExistsError

        client = self.service().get_container_client(container)
        with contextlib.suppress(ResourceExistsError):
            client.create_container()
        return client.get_blob_client(blob).upload_blob(data, overwrite=True)["etag"]

    def sas(self, container: str, blob: str, *, expires_in: float = 3600.0) -> str:
        """A read-only SAS query string for one blob (negative `expires_in`: already expired)."""
        from azure.storage.blob import BlobSasPermissions, generate_blob_sas

        expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=expires_in)
        return generate_blob_sas(ACCOUNT, container, blob, account_key=ACCOUNT_KEY,
                                 permission=BlobSasPermissions(read=True), expiry=expiry)  # fmt: skip

    def log_text(self) -> str:
        return pathlib.Path(self._workspace.name, "azurite.log").read_text(errors="replace")

    def stop(self) -> None:
        super().stop()
        self._log.close()
        self._workspace.cleanup()
