"""nginx as our own short-lived process, serving one directory on loopback (for bench/serve.py).

`daemon off; master_process off; worker_processes 1;`, config, pid and logs in a
temporary directory, `sendfile on`. It is stopped by its PID, never by name.
If nginx is missing, `ensure_nginx()` installs `nginx-light` with apt-get.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time

HOST = "127.0.0.1"

CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    types {{ }}
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    server {{
        listen {host}:{port};
        root {root};
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def wait_listening(port: int, process: subprocess.Popen, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with status {process.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.2):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start listening on {HOST}:{port} within {timeout:.0f} s")
        time.sleep(0.05)


def stop_process(process: subprocess.Popen, timeout: float = 5.0) -> None:
    """SIGTERM the process by its PID, then SIGKILL it if it lingers."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait()


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


def ensure_nginx() -> str:
    binary = nginx_binary()
    if binary is None:
        print("nginx not found: apt-get install -y nginx-light ...", flush=True)
        subprocess.run(["apt-get", "update"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "nginx-light"], check=True, stdout=subprocess.DEVNULL)
        binary = nginx_binary()
        if binary is None:
            raise FileNotFoundError("nginx is still missing after installing nginx-light")
    return binary


class Nginx:
    """`with Nginx(root) as server:` then fetch `server.url(relative_path)`."""

    def __init__(self, root: pathlib.Path, *, timeout: float = 10.0) -> None:
        self.root = root.resolve()
        self.timeout = timeout
        self.process: subprocess.Popen | None = None
        self._tmp: str | None = None
        self.port = 0

    def __enter__(self) -> Nginx:
        binary = ensure_nginx()
        self._tmp = tempfile.mkdtemp(prefix="pt2serve-bench-nginx-")
        self.port = free_port()
        conf = pathlib.Path(self._tmp, "nginx.conf")
        conf.write_text(CONF.format(tmp=self._tmp, host=HOST, port=self.port, root=self.root))
        self.process = subprocess.Popen([binary, "-p", self._tmp, "-c", str(conf)], stdin=subprocess.DEVNULL)
        try:
            wait_listening(self.port, self.process, "nginx", self.timeout)
        except BaseException:
            self.__exit__()
            raise
        return self

    def url(self, relative: str) -> str:
        return f"http://{HOST}:{self.port}/{relative}"

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None:
            stop_process(self.process)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
