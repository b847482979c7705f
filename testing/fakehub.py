"""nginx sites for redirect tests: any server block, and a fake Hugging Face Hub with its CDN.

`NginxSite(body)` runs nginx (testing/servers.py's configuration) on a free loopback port with `body`
in its server block; its access log records, per request, the method, status, the raw request URI,
whether an `Authorization` header came (`auth` True/False: never the value), the Range and the
If-Match. `restart(body)` swaps the block on the same port (the site's URL stays valid).

`FakeHub` is the Hub's URL layout (`/[datasets/|spaces/]<repo>/resolve/<revision>/<path>`) on one nginx
and the CDN that serves its large files on another. As the Hub does, the hub answers a large (LFS) file
with 302 to a signed CDN URL (`?sig=<key>`), with `X-Repo-Commit`, `X-Linked-Size` and `X-Linked-Etag`
on the 302, and a small file (`*.json`) itself, with `X-Repo-Commit`. Unknown repositories answer 401
`X-Error-Code: RepoNotFound` (as the Hub answers an anonymous caller), unknown revisions 404
`RevisionNotFound`, unknown files 404 `EntryNotFound`; a gated repository answers 401 `GatedRepo`
without the right bearer token. `rotate(moves)` changes the CDN's signing key, so URLs signed before
stop working (403, as an expired signature), and can move a revision (`main`) to another commit.
"""

from __future__ import annotations

import contextlib
import hashlib
import pathlib
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from testing.servers import (
    HOST,
    NGINX_CONF,
    _ServerProcess,
    ensure_nginx,
    free_port,
    stop_process,
    wait_listening,
)

# who sent an Authorization header, never its value
SITE_LOG = """
    map $http_authorization $auth_given { "" 0; default 1; }
    log_format site '$request_method $status "$request_uri" $auth_given "$http_range" "$http_if_match"';"""
_LINE = re.compile(r'(\S+) (\d+) "([^"]*)" ([01]) "([^"]*)" "([^"]*)"')


class NginxSite(_ServerProcess):
    """nginx serving one server block on a free loopback port, stopped by its PID."""

    name = "nginx"

    def __init__(self, body: str, root: pathlib.Path | None = None) -> None:
        self._binary = ensure_nginx()
        self._tmp = pathlib.Path(tempfile.mkdtemp(prefix="pt2serve-site-"))
        self.root = root or self._tmp  # what the server block's paths are relative to
        self.port = free_port()
        self.base_url = f"http://{HOST}:{self.port}"
        self._log_offset = 0
        try:
            self._start(body)
        except BaseException:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise

    def _start(self, body: str) -> None:
        conf = self._tmp / "nginx.conf"
        site = f"access_log {self._tmp}/site.log site;\n{body}"
        conf.write_text(
            NGINX_CONF.format(
                tmp=self._tmp, host=HOST, port=self.port, root=self.root, extra=site, http_extra=SITE_LOG
            )
        )
        self.process = subprocess.Popen([self._binary, "-p", str(self._tmp), "-c", str(conf)],
                                        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        try:
            wait_listening(self.port, self.process, "nginx", 10.0)
        except BaseException:
            self.stop()
            raise

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    def restart(self, body: str) -> None:
        """The same port, a new server block (the log so far is kept)."""
        assert self.process is not None
        stop_process(self.process)
        self._start(body)

    def take_log(self) -> list[dict]:
        """The requests logged since the last call: method, status, uri, auth, range, if_match."""
        time.sleep(0.01)  # nginx writes the line after the response
        records = []
        with contextlib.suppress(FileNotFoundError), open(self._tmp / "site.log", "rb") as handle:
            handle.seek(self._log_offset)
            data = handle.read()
            complete = data.rfind(b"\n") + 1
            self._log_offset += complete
            for line in data[:complete].decode().splitlines():
                match = _LINE.fullmatch(line.strip())
                if match:
                    method, status, uri, auth, rng, if_match = match.groups()
                    if_match = if_match.replace("\\x22", '"')  # nginx escapes quotes in its log
                    records.append({"method": method, "status": int(status), "uri": uri, "auth": auth == "1",
                                    "range": None if rng == "-" else rng,
                                    "if_match": None if if_match == "-" else if_match})  # fmt: skip
        return records

    def stop(self) -> None:
        super().stop()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()


def _refuse(prefix: str, code: str, status: int) -> str:
    """A location under `prefix` answering `status` with the Hub's X-Error-Code."""
    return f"""
        location {prefix} {{ add_header X-Error-Code {code} always; return {status}; }}"""


def _digest(data: bytes | pathlib.Path) -> str:
    """The Hub's X-Linked-Etag is the LFS object's SHA-256 (of a linked file: of its name and size)."""
    if isinstance(data, pathlib.Path):
        return hashlib.sha256(f"{data.resolve()}:{data.stat().st_size}".encode()).hexdigest()
    return hashlib.sha256(data).hexdigest()


def commit_of(text: str) -> str:
    """A 40-hex commit id, as the Hub names commits."""
    return hashlib.sha1(text.encode()).hexdigest()


@dataclass
class HubRepo:
    """One repository: files per commit, and which revision names point at which commit."""

    repo_id: str  # with its type's prefix: "org/model", "datasets/org/data", "spaces/org/app"
    commits: dict[str, dict[str, bytes | pathlib.Path]]  # commit -> path -> bytes (or a file to link)
    revisions: dict[str, str]  # name ("main", "refs/pr/1", ...) -> commit
    gated_token: str | None = None  # a gated repo: only this bearer token reads it
    small: tuple[str, ...] = (".json",)  # served by the hub itself; every other file through the CDN


@dataclass
class FakeHub:
    """The Hub (nginx) and its CDN (nginx) on loopback; see the module docstring."""

    repos: list[HubRepo]
    key: int = 1
    folder: pathlib.Path = field(
        default_factory=lambda: pathlib.Path(tempfile.mkdtemp(prefix="pt2serve-hub-"))
    )

    def __post_init__(self) -> None:
        for repo in self.repos:
            for commit, files in repo.commits.items():
                for path, data in files.items():
                    target = self.folder / repo.repo_id / commit / path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if isinstance(data, pathlib.Path):  # a big file (a benchmark's): linked, not copied
                        target.symlink_to(data.resolve())
                    else:
                        target.write_bytes(data)
        try:
            self.cdn = NginxSite(self._cdn_body(), root=self.folder)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        try:
            self.hub = NginxSite(self._hub_body())
        except BaseException:
            self.cdn.cleanup()
            shutil.rmtree(self.folder, ignore_errors=True)
            raise

    @property
    def endpoint(self) -> str:
        """What HF_ENDPOINT names."""
        return self.hub.base_url

    def cdn_url(self, repo_id: str, commit: str, path: str) -> str:
        """The signed URL the hub redirects `path` at `commit` to (valid until the next `rotate`)."""
        return f"{self.cdn.base_url}/{repo_id}/{commit}/{path}?sig=key{self.key}"

    def rotate(self, moves: dict[tuple[str, str], str] | None = None) -> None:
        """A new CDN signing key (URLs signed before now answer 403); `moves`: (repo_id, revision) ->
        the commit that revision names from now on."""
        for (repo_id, revision), commit in (moves or {}).items():
            next(repo for repo in self.repos if repo.repo_id == repo_id).revisions[revision] = commit
        self.key += 1
        self.cdn.restart(self._cdn_body())
        self.hub.restart(self._hub_body())

    def _cdn_body(self) -> str:
        return f"""
        location / {{
            if ($arg_sig != "key{self.key}") {{ return 403; }}
        }}"""

    def _hub_body(self) -> str:
        blocks = [_refuse("/", "RepoNotFound", 401)]
        for repo in self.repos:
            blocks.append(_refuse(f"/{repo.repo_id}/", "RevisionNotFound", 404))
            names = {**repo.revisions, **{commit: commit for commit in repo.commits}}
            for name, commit in names.items():
                blocks.append(_refuse(f"/{repo.repo_id}/resolve/{name}/", "EntryNotFound", 404))
                for path, data in repo.commits[commit].items():
                    blocks.append(self._file_block(repo, name, commit, path, data))
        return "".join(blocks)

    def _file_block(
        self, repo: HubRepo, name: str, commit: str, path: str, data: bytes | pathlib.Path
    ) -> str:
        gate = ""
        if repo.gated_token:
            gate = f"""
            if ($http_authorization != "Bearer {repo.gated_token}") {{
                add_header X-Error-Code GatedRepo always;
                return 401;
            }}"""
        stored = self.folder / repo.repo_id / commit / path
        if path.endswith(repo.small):
            answer = f"""
            add_header X-Repo-Commit {commit};
            alias {stored};"""
        else:
            answer = f"""
            add_header X-Repo-Commit {commit};
            add_header X-Linked-Size {stored.stat().st_size};
            add_header X-Linked-Etag '"{_digest(data)}"';
            return 302 {self.cdn_url(repo.repo_id, commit, path)};"""
        return f"""
        location = /{repo.repo_id}/resolve/{name}/{path} {{{gate}{answer}
        }}"""

    def stop(self) -> None:
        self.hub.cleanup()
        self.cdn.cleanup()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> FakeHub:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
