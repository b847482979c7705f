"""Which locations a client may open (--allow-open PATTERN): one rule per refusal, each named.

Patterns are fnmatch-style (`*` also matches `/`), matched against the location as given:
`hf://org/*`, `s3://team-models/*`, `https://models.example.com/*`, `http://127.0.0.1:*/*`,
`/srv/models/*`. Without a pattern nothing can be opened. What a location may reach once it
matches is the address rule's (app/addresses.py) for http(s); s3://, gs://, az:// and hf:// go
to the endpoints the operator configured, with the server's own credentials.

A path is allowed only by a pattern that is a path: the folder it names (the part before its
first wildcard) and the pattern's rest are matched against the path's real location, with every
symbolic link followed, so neither `..` nor a link out of the folder leaves it.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from .errors import ApiError

WILDCARDS = "*?["
MAX_LOCATION = 4096
REMOTE_SCHEMES = ("http", "https", "s3", "gs", "az", "hf")


def refused(message: str) -> ApiError:
    return ApiError(403, "open_refused", message)


@dataclass(frozen=True)
class Target:
    """A location that passed the patterns: what to open, and whether the address rule applies."""

    location: str
    http: bool


class OpenPolicy:
    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = tuple(patterns)
        self.remote = tuple(p for p in self.patterns if "://" in p)
        self.folders = tuple(_folder_pattern(p) for p in self.patterns if "://" not in p)
        self.named_hosts = frozenset(h for h in (_named_host(p) for p in self.remote) if h)

    @property
    def enabled(self) -> bool:
        return bool(self.patterns)

    def check(self, location: str) -> Target:
        """The location to open, or the ApiError (404 when opening is off, else 403) naming the rule."""
        if not self.enabled:
            raise ApiError(404, "opening_disabled", "opening is off: the service runs without --allow-open")
        if len(location) > MAX_LOCATION or any(ord(c) < 32 or ord(c) == 127 for c in location):
            raise refused("the location is too long or holds control characters")
        scheme, sep, _ = location.partition("://")
        if not sep:
            return Target(self._check_path(location), http=False)
        scheme = scheme.lower()
        if scheme not in REMOTE_SCHEMES:
            schemes = ", ".join(REMOTE_SCHEMES)
            raise refused(f"scheme {scheme!r} is not one an archive is read from ({schemes})")
        if scheme in ("http", "https"):
            parts = urlsplit(location)
            if parts.username is not None or parts.password is not None:
                raise refused("credentials in a URL are refused: opened locations are read with the server's")
            if not parts.hostname:
                raise refused("the URL names no host")
        if not any(fnmatch.fnmatchcase(location, pattern) for pattern in self.remote):
            raise refused(f"{location} matches no --allow-open pattern (allowed: {self._allowed()})")
        return Target(location, http=scheme in ("http", "https"))

    def _check_path(self, path: str) -> str:
        if not self.folders:
            raise refused(
                f"paths are refused: no --allow-open pattern is a folder (allowed: {self._allowed()})"
            )
        if not os.path.isabs(path):
            raise refused("a path must be absolute")
        if ".." in path.replace("\\", "/").split("/"):
            raise refused("a path with '..' is refused")
        real = os.path.realpath(path)
        inside_any = False
        for folder, rest in self.folders:
            real_folder = os.path.realpath(folder)
            if os.path.commonpath([real, real_folder]) != real_folder:
                continue
            inside_any = True
            if fnmatch.fnmatchcase(os.path.relpath(real, real_folder), rest):
                return real
        if inside_any:
            raise refused(f"{path} matches no --allow-open pattern (allowed: {self._allowed()})")
        raise refused(
            f"{path} is outside every folder an --allow-open pattern names, once symbolic links are followed"
        )

    def _allowed(self) -> str:
        return ", ".join(self.patterns)


def _folder_pattern(pattern: str) -> tuple[str, str]:
    """`/srv/models/*.pt2` -> ('/srv/models', '*.pt2'): the folder before the first wildcard, the rest."""
    parts = pattern.split("/")
    fixed = next((i for i, part in enumerate(parts) if any(c in part for c in WILDCARDS)), len(parts) - 1)
    folder = "/".join(parts[:fixed]) or "/"
    return posixpath.normpath(os.path.abspath(folder)), "/".join(parts[fixed:])


def _named_host(pattern: str) -> str | None:
    """The host an http(s) pattern names without a wildcard (`http://127.0.0.1:*/*` -> 127.0.0.1)."""
    scheme, _, rest = pattern.partition("://")
    if scheme.lower() not in ("http", "https"):
        return None
    authority = rest.split("/", 1)[0].rsplit("@", 1)[-1]
    if authority.startswith("[") and "]" in authority:  # [::1]:8000
        host = authority[1 : authority.index("]")]
    else:
        host = authority.split(":")[0]
    if not host or any(c in host for c in WILDCARDS):
        return None
    return host.lower()
