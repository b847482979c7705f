"""An https origin behind a private CA for the tests: `trustme` issues the certificates, nginx serves.

with PrivateCA(tmp_path) as ca, ca.nginx(root) as server:
    server.tls_base_url   # https://127.0.0.1:PORT (HTTP/2 or 1.1), server.base_url: plain http
    ca.ca_file            # the CA certificate (PEM), ca.ca_dir: the same in `openssl rehash` layout
"""

from __future__ import annotations

import contextlib
import pathlib
import ssl
import subprocess
from collections.abc import Iterator, Mapping

from testing import provision
from testing.servers import NginxProcess


class PrivateCA:
    def __init__(self, workdir: pathlib.Path) -> None:
        import trustme

        self.workdir = workdir
        authority = trustme.CA()
        leaf = authority.issue_cert("127.0.0.1", "localhost")
        self.ca_file = workdir / "private-ca.pem"
        authority.cert_pem.write_to_path(str(self.ca_file))
        self.chain_file = workdir / "server-chain.pem"
        self.chain_file.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        self.key_file = workdir / "server-key.pem"
        leaf.private_key_pem.write_to_path(str(self.key_file))

    @property
    def ca_dir(self) -> pathlib.Path:
        """The CA certificate in a directory hashed as OpenSSL looks certificates up (SSL_CERT_DIR)."""
        directory = self.workdir / "hashed-certs"
        if not directory.exists():
            directory.mkdir()
            (directory / "private-ca.pem").write_bytes(self.ca_file.read_bytes())
            openssl = provision.ensure_apt("openssl", "openssl")
            subprocess.run([openssl, "rehash", str(directory)], check=True, capture_output=True)
        return directory

    def server_context(self) -> ssl.SSLContext:
        """A TLS server context presenting the certificate (for servers of the tests' own)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.chain_file, self.key_file)
        return context

    def nginx(self, root: pathlib.Path) -> NginxProcess:
        return NginxProcess(root, tls=(str(self.chain_file), str(self.key_file)))


@contextlib.contextmanager
def https_origin(
    workdir: pathlib.Path, files: Mapping[str, bytes]
) -> Iterator[tuple[PrivateCA, NginxProcess]]:
    """nginx serving `files` over http and https (a certificate of a fresh private CA)."""
    root = workdir / "root"
    root.mkdir()
    for name, data in files.items():
        (root / name).write_bytes(data)
    ca = PrivateCA(workdir)
    with ca.nginx(root) as server:
        yield ca, server
