"""Range-capable HTTP servers (the FaultServer, nginx) each in a process of its own, for benchmarks and tests.

As a script it serves one file with the tests' FaultServer (asyncio, in-memory bytes):

    python3 testing/servers.py --file PATH [--delay 0.03] [--port 0] [--path /NAME]

It prints ``READY <url>`` once listening, then takes commands on stdin, one per line, and answers
each with one line on stdout: ``log`` (the requests since the last ``log``, as JSON), ``delay S``,
``quit``. End of stdin also stops it, so it cannot outlive the benchmark that started it.

From a benchmark, ``FaultServerProcess`` and ``NginxProcess`` start a server, expose ``url`` and
``take_log()`` (a list of ``{"method", "range", "status", "bytes"}``), and stop the process by its
PID on ``stop()`` / context exit, also on Ctrl-C or failure (each also registers an atexit stop).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import json
import os
import pathlib
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"  # loopback only


# --------------------------------------------------------------------------- shared process handling


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """user + system CPU time of a live process, from /proc (0.0 if it is gone)."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_process(process: subprocess.Popen, grace: float = 5.0) -> None:
    """Ask politely (SIGTERM), then SIGKILL; always by this process's own PID."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait()


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


class _ServerProcess:
    name = "server"
    process: subprocess.Popen | None = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)


# --------------------------------------------------------------------------- FaultServer in a child process


class FaultServerProcess(_ServerProcess):
    """testing/faultserver.py's FaultServer serving one file, in a child Python process."""

    name = "FaultServer"

    def __init__(self, file: pathlib.Path, *, delay: float = 0.0, url_path: str | None = None,
                 timeout: float = 120.0) -> None:  # fmt: skip
        url_path = url_path or "/" + file.name
        command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--file", str(file),
                   "--delay", repr(delay), "--path", url_path]  # fmt: skip
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        atexit.register(self.stop)
        try:
            line = self._line(timeout)
            if not line.startswith("READY "):
                raise RuntimeError(f"range server did not start: {line!r}")
            self.url = line.split(" ", 1)[1]
        except BaseException:
            self.stop()
            raise

    def _line(self, timeout: float = 60.0) -> str:
        assert self.process is not None and self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            raise RuntimeError("range server did not answer in time")
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"range server exited (code {self.process.poll()})")
        return line.strip()

    def _command(self, text: str) -> str:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()
        return self._line()

    def take_log(self) -> list[dict]:
        """The requests served since the last call (and forget them)."""
        return json.loads(self._command("log"))

    def set_delay(self, seconds: float) -> None:
        self._command(f"delay {seconds!r}")

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(OSError, ValueError):
            assert process.stdin is not None
            process.stdin.close()  # EOF: the server stops itself
        try:
            process.wait(5.0)
        except subprocess.TimeoutExpired:
            stop_process(process)


# --------------------------------------------------------------------------- nginx


NGINX_CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 64; }}
http {{
    log_format bench '$request_method $status $body_bytes_sent "$http_range"';
    access_log {tmp}/access.log bench;{http_extra}
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
        {extra}
    }}
}}
"""
# The proxy baseline: 1 MiB buffers, HTTP/1.1 keep-alive upstream, never a temp file.
PROXY_LOCATION = """
        location / {{
            proxy_pass {upstream};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffer_size 1m;
            proxy_buffers 8 1m;
            proxy_busy_buffers_size 2m;
            proxy_max_temp_file_size 0;
        }}"""
TLS_LISTEN = """
        listen {host}:{port} ssl http2;
        ssl_certificate {chain};
        ssl_certificate_key {key};"""
_ACCESS = re.compile(r'(\S+) (\d+) (\d+) "([^"]*)"')


def nginx_binary() -> str | None:
    from testing import provision  # here, not at the top: this file also runs as a script

    return provision.which("nginx")


def ensure_nginx() -> str:
    """The nginx binary, installing Debian's nginx first if it is missing."""
    from testing import provision

    return provision.ensure_nginx()


class NginxProcess(_ServerProcess):
    """nginx (single process, `daemon off`, `master_process off`) serving a directory on loopback."""

    name = "nginx"

    def __init__(
        self,
        root: pathlib.Path,
        *,
        timeout: float = 10.0,
        limit_rate: str | None = None,
        proxy_to: str | None = None,
        tls: tuple[str, str] | None = None,
    ) -> None:
        """limit_rate: nginx's per-connection rate cap (e.g. "100m"), as S3 and CDNs cap connections.
        proxy_to: a base URL to proxy_pass every request to instead of serving `root`.
        tls: (certificate chain file, key file): also serve https (HTTP/2 or 1.1) at `tls_base_url`."""
        binary = ensure_nginx()
        extra = f"limit_rate {limit_rate};" if limit_rate else ""
        if proxy_to:
            extra += PROXY_LOCATION.format(upstream=proxy_to)
        if tls:
            tls_port = free_port()
            extra += TLS_LISTEN.format(host=HOST, port=tls_port, chain=tls[0], key=tls[1])
            self.tls_base_url = f"https://{HOST}:{tls_port}"
        self._tmp = tempfile.mkdtemp(prefix="pt2serve-nginx-")
        port = free_port()
        conf = pathlib.Path(self._tmp, "nginx.conf")
        root = root.resolve()
        conf.write_text(
            NGINX_CONF.format(tmp=self._tmp, host=HOST, port=port, root=root, extra=extra, http_extra="")
        )
        self._log = pathlib.Path(self._tmp, "access.log")
        self._log_offset = 0
        self.base_url = f"http://{HOST}:{port}"
        self.process = subprocess.Popen([binary, "-p", self._tmp, "-c", str(conf)],
                                        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        atexit.register(self.stop)
        try:
            deadline = time.monotonic() + timeout
            while True:
                if self.process.poll() is not None:
                    error = self.process.stderr.read().decode() if self.process.stderr else ""
                    raise RuntimeError(f"nginx exited ({self.process.returncode}): {error.strip()}")
                with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.2):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("nginx did not start listening")
                time.sleep(0.05)
        except BaseException:
            self.stop()
            raise

    def url(self, name: str) -> str:
        return f"{self.base_url}/{name}"

    def take_log(self) -> list[dict]:
        time.sleep(0.01)  # nginx writes the access log line after the response
        with contextlib.suppress(FileNotFoundError), open(self._log, "rb") as handle:
            handle.seek(self._log_offset)
            data = handle.read()
            complete = data.rfind(b"\n") + 1
            self._log_offset += complete
            records = []
            for line in data[:complete].decode().splitlines():
                match = _ACCESS.fullmatch(line.strip())
                if match:
                    method, status, sent, rng = match.groups()
                    records.append({"method": method, "status": int(status), "bytes": int(sent),
                                    "range": None if rng == "-" else rng})  # fmt: skip
            return records
        return []

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self._tmp, ignore_errors=True)


# --------------------------------------------------------------------------- the child process


def _serve(file: pathlib.Path, url_path: str, delay: float, port: int) -> int:
    sys.path.insert(0, str(ROOT))
    from testing.faultserver import FaultServer

    async def run() -> None:
        loop = asyncio.get_running_loop()
        commands: asyncio.Queue[str | None] = asyncio.Queue()

        def read_stdin() -> None:  # a thread: blocking reads of stdin, handed to the loop
            for line in sys.stdin:
                loop.call_soon_threadsafe(commands.put_nowait, line.strip())
            loop.call_soon_threadsafe(commands.put_nowait, None)

        server = FaultServer(HOST, port)
        server.put(url_path, file.read_bytes())
        server.delay = delay
        async with server:
            print(f"READY {server.url(url_path)}", flush=True)
            threading.Thread(target=read_stdin, daemon=True).start()
            while (command := await commands.get()) not in (None, "quit"):
                if command == "log":
                    records = [{"method": r.method, "range": r.range, "status": r.status,
                                "bytes": r.body_bytes, "connection": r.connection}
                               for r in server.log]  # fmt: skip
                    server.log.clear()
                    print(json.dumps(records), flush=True)
                elif command.startswith("delay "):
                    server.delay = float(command.split()[1])
                    print("ok", flush=True)
                else:
                    print(json.dumps({"error": f"unknown command {command!r}"}), flush=True)
            if server.errors:
                print(f"server errors: {server.errors!r}", file=sys.stderr)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve one file with FaultServer (see module docstring)")
    parser.add_argument("--file", type=pathlib.Path, required=True)
    parser.add_argument("--path", default=None, help="URL path (default /<file name>)")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds added to every request")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    args = parser.parse_args(argv)
    return _serve(args.file, args.path or "/" + args.file.name, args.delay, args.port)


if __name__ == "__main__":
    sys.exit(main())
