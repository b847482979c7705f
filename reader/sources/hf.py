"""hf://[datasets/|spaces/]<repo_id>[@<revision>]/<path>: a file on the Hugging Face Hub, read by ranges.

Spelled as huggingface_hub's HfFileSystem spells it; the revision may be URL-encoded
(`@refs%2Fpr%2F1`) or a literal `refs/pr/N` / `refs/convert/<name>`. It maps to the Hub's
`{HF_ENDPOINT or https://huggingface.co}/[datasets/|spaces/]<repo_id>/resolve/<revision>/<path>`,
which answers small files itself and large (LFS) ones with a 302 to a signed CDN URL.

- The token is huggingface_hub's: `HF_TOKEN` (or the older `HUGGING_FACE_HUB_TOKEN`), else the file
  it writes on login (`HF_TOKEN_PATH`, else `$HF_HOME/token`, HF_HOME defaulting to
  `$XDG_CACHE_HOME/huggingface`, i.e. ~/.cache/huggingface). It goes to the Hub as a bearer token,
  and never to the CDN (redirects.py).
- A moving revision (`main`) is pinned at open to the commit the first answer names
  (`X-Repo-Commit`): later reads and re-resolves ask `/resolve/<commit>/`, so one open never
  mixes two commits; a signed CDN URL that expires is resolved again at that commit.
"""

from __future__ import annotations

import os
import pathlib
import re
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import httpx

from ..errors import LocationError
from .http import HttpOptions, HttpSource
from .keys import bad_segment
from .location import rest_of
from .policy import ExchangeView, StorePolicy
from .transport.redirects import origin_of

DEFAULT_ENDPOINT = "https://huggingface.co"
REPO_TYPE_PREFIXES = ("datasets/", "spaces/")
# huggingface_hub's rules for a repo id: [namespace/]name of word characters, '-' and '.', at most 96
REPO_NAME = re.compile(r"[\w\-.]{1,96}")
# revisions with a '/' that huggingface_hub also takes unencoded after '@'
SPECIAL_REVISION = re.compile(r"refs/(?:pr/\d+|convert/[\w\-.]+)")
COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class HubFile:
    """One file of one repository at one revision."""

    prefix: str  # "", "datasets/" or "spaces/"
    repo_id: str
    revision: str
    path: str

    def url(self, endpoint: str, revision: str | None = None) -> str:
        """The Hub's resolve URL, quoted as huggingface_hub's hf_hub_url quotes it."""
        revision = quote(revision or self.revision, safe="")
        return f"{endpoint.rstrip('/')}/{self.prefix}{self.repo_id}/resolve/{revision}/{quote(self.path)}"


def parse_hf_location(location: str) -> HubFile:
    """hf://[datasets/|spaces/]<repo_id>[@<revision>]/<path> -> HubFile, or LocationError.

    Without `@revision`, the repo id is `namespace/name` (a repo without namespace needs
    `@revision` when its path has folders, e.g. hf://gpt2@main/onnx/model.onnx)."""
    hub = split_hf_location(location)
    _check(location, hub.repo_id, hub.revision, hub.path)
    return hub


def split_hf_location(location: str) -> HubFile:
    """The one split of an hf:// location into repository, revision and path, unchecked (what the
    service's open patterns match is split here too; `parse_hf_location` checks the parts)."""
    rest = rest_of(location, "hf") or ""
    prefix = next((p for p in REPO_TYPE_PREFIXES if rest.startswith(p)), "")
    rest = rest[len(prefix) :]
    repo_part, at, after = rest.partition("@")
    if at:
        special = SPECIAL_REVISION.match(after)
        if special and after[special.end() : special.end() + 1] in ("/", ""):
            revision, path = special[0], after[special.end() + 1 :]
        else:
            revision, _, path = after.partition("/")
            revision = unquote(revision)
        repo_id = repo_part
    else:
        segments = rest.split("/")
        repo_id = "/".join(segments[:2]) if len(segments) > 2 else segments[0]
        path = "/".join(segments[len(repo_id.split("/")) :])
        revision = "main"
    return HubFile(prefix, repo_id, revision, path)


def _check(location: str, repo_id: str, revision: str, path: str) -> None:
    usage = "expected hf://[datasets/|spaces/]<repo_id>[@<revision>]/<path>"
    names = repo_id.split("/")
    if not 1 <= len(names) <= 2 or not all(REPO_NAME.fullmatch(name) for name in names):
        raise LocationError(f"{location!r}: {repo_id!r} is not a repository id; {usage}")
    if any(name.startswith(("-", ".")) or name.endswith(("-", ".")) or "--" in name or ".." in name
           for name in names):  # fmt: skip
        raise LocationError(f"{location!r}: {repo_id!r} is not a repository id; {usage}")
    if revision in ("", ".", ".."):
        raise LocationError(f"{location!r}: {revision!r} is not a revision; {usage}")
    if not path:
        raise LocationError(f"{location!r}: no file path in the repository; {usage}")
    if bad_segment(path) or "?" in path or "#" in path:
        raise LocationError(f"{location!r}: {path!r} is not a file path in the repository; {usage}")


def hub_token(environ: Mapping[str, str] | None = None) -> str | None:
    """The token huggingface_hub would use: the environment, else its token file."""
    env = os.environ if environ is None else environ
    token = env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN")
    if token and token.strip():
        return token.strip()
    try:
        token = token_file(env).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return token or None


def token_file(environ: Mapping[str, str] | None = None) -> pathlib.Path:
    """Where huggingface_hub keeps the token of `hf auth login`."""
    env = os.environ if environ is None else environ
    path = env.get("HF_TOKEN_PATH")
    if not path:
        cache = env.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
        path = os.path.join(env.get("HF_HOME") or os.path.join(cache, "huggingface"), "token")
    return pathlib.Path(path).expanduser()


class HubToken(httpx.Auth):
    """A bearer token for the Hub (HttpSource runs auth for the Hub's origin only, never the CDN)."""

    def __init__(self, token: str) -> None:
        self._header = f"Bearer {token}"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = self._header
        yield request


class HubPolicy(StorePolicy):
    """The Hub: pinned to the commit its first answer names, with the Hub's errors spelled out."""

    PINNED = ("commit", "file_tag")

    def __init__(self, hub_file: HubFile, endpoint: str, *, has_token: bool) -> None:
        self.hub_file = hub_file
        self.endpoint = endpoint
        self.has_token = has_token
        self.commit: str | None = None  # the commit the first answer named
        self.file_tag: str | None = None  # ... and its tag of the file's bytes (the LFS SHA-256 or the ETag)

    def remember(self, response: httpx.Response, exchange: ExchangeView) -> str | None:
        """The resolve URL at the commit the Hub's answer names (a moving `main` pinned)."""
        first = response.history[0] if response.history else response
        commit = first.headers.get("x-repo-commit", "").strip().lower()
        if not COMMIT.fullmatch(commit):
            return None
        self.commit = commit
        self.file_tag = _file_tag(first)
        return self.hub_file.url(self.endpoint, commit)

    def pinned_by_url(self, exchange: ExchangeView) -> bool:
        # the Hub's own answers are pinned by the commit in the URL; If-Match is for the CDN's object
        return self.commit is not None and origin_of(exchange.read_url) == exchange.origin

    async def revalidate(self, exchange: ExchangeView) -> bool | None:
        """True while the revision as given still names the bytes opened: asked of the Hub alone
        (its answer names the commit and the file's tag; the CDN is not asked), so a moved `main`
        whose file changed makes the service reopen."""
        if self.commit is None:  # not the Hub's answer: as any HTTP source
            return None
        request = exchange.request("HEAD", {}, exchange.url)
        response = await exchange.send(request, "revalidate", follow_redirects=False)
        await response.aclose()
        if not (response.is_success or response.is_redirect):
            return False
        if response.headers.get("x-repo-commit", "").strip().lower() == self.commit:
            return True
        return self.file_tag is not None and _file_tag(response) == self.file_tag

    def explain(self, response: httpx.Response, exchange: ExchangeView, generic: str) -> str:
        if origin_of(response.url) != exchange.origin:  # the CDN's answer, not the Hub's
            return generic
        reason = self._reason(response)
        return generic if reason is None else f"HTTP {response.status_code} ({reason})"

    def _reason(self, response: httpx.Response) -> str | None:
        code = response.headers.get("x-error-code", "")
        hub = self.hub_file
        repo = f"{hub.prefix}{hub.repo_id}"
        login = f"no token in HF_TOKEN, HUGGING_FACE_HUB_TOKEN or {token_file()}: set one or `hf auth login`"
        if code == "GatedRepo":
            if self.has_token:
                return f"{repo} is gated and this token has no access: accept its conditions on the Hub"
            return f"{repo} is gated: it needs a token of an account with access ({login})"
        if code == "RepoNotFound" or response.status_code == 401:
            needs = (
                "the token has no access to it" if self.has_token else f"private repos need a token ({login})"
            )
            return f"repository {repo} not found, or private: {needs}"
        if code == "RevisionNotFound":
            return f"revision {hub.revision!r} not found in {repo}"
        if code == "EntryNotFound" or response.status_code == 404:
            return f"file {hub.path!r} not found in {repo} at revision {hub.revision!r}"
        return None


def _file_tag(response: httpx.Response) -> str | None:
    """What names a file's bytes in the Hub's answer: an LFS file's SHA-256, else its ETag."""
    return response.headers.get("x-linked-etag") or response.headers.get("etag")


async def open_hf(
    location: str, *, tail_size: int, options: HttpOptions | None, pinned: Mapping[str, Any] | None = None
) -> HttpSource:
    """Open a file on the Hub (see the module docstring)."""
    hub_file = parse_hf_location(location)
    endpoint = (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    token = hub_token()
    return await HttpSource.open(
        hub_file.url(endpoint),
        tail_size=tail_size,
        options=options,
        auth=HubToken(token) if token else None,
        location=location,
        pinned=pinned,
        policy=HubPolicy(hub_file, endpoint, has_token=token is not None),
    )


__all__ = [
    "REPO_TYPE_PREFIXES",
    "HubFile",
    "parse_hf_location",
    "split_hf_location",
]
