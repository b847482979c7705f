"""The grammar of --allow-open patterns, and locations parsed into the same parts.

A pattern is parsed once, at start-up, into the parts its scheme has; a location is parsed into the
same parts by the same rules, and each part is matched on its own, so no wildcard reaches into
another part.

The grammar (a wildcard is `*`; every other character stands for itself):

- `http(s)://HOST[:PORT][/PATH][?QUERY]`. HOST: a name or an address (`[::1]`), compared
  lowercase (IDNA for other scripts, addresses in their canonical spelling); `*` matches within
  one label (`*.example.com` is `a.example.com`, not `a.b.example.com`); a HOST that is only `*`
  matches every host. PORT: absent means the scheme's default port only (80, 443), `:*` any port.
  PATH: `/`-separated segments; `*` matches within one segment, a segment `**` any number of
  segments (`/models/**` is everything under /models/); no PATH means `/**`. It is matched
  against the path exactly as the client sends it: percent-encoded as httpx encodes it.
  QUERY: a location with a query (`?`, even empty) opens only through a pattern with one, whose
  `*` matches anything (`?*`: any query, or none); a pattern without `?` admits no query.
  Userinfo and fragments are refused in patterns (at start-up) and in locations.
- `s3://BUCKET[/KEY]`, `gs://BUCKET[/KEY]`, `az://CONTAINER[/BLOB]`: BUCKET a glob of its own (`*`
  within the name), KEY a path glob as above (no KEY: `**`). A location with `?` or `#` is refused.
- `hf://[datasets/|spaces/]NAMESPACE/NAME[@REVISION][/PATH]`: the repository (two segment globs;
  a repository without a namespace needs `@`: `hf://gpt2@main/**`), the revision (a glob where `*`
  matches anything; absent: any revision) and the path in the repository (a path glob; absent: `**`).
  A location is split into repository, revision and path as the reader splits it.
- Anything else is a folder pattern (`/srv/models/**`): the folder before the first segment with
  a wildcard, and the rest a path glob matched against the location's path relative to that
  folder, both once every symbolic link is followed (`realpath`), so neither `..` nor a link out of
  the folder leaves it. A path opens only through a folder pattern.

Before any matching, a key, URL path or hf:// revision with a `.`, `..` or empty segment is refused,
raw or percent-encoded (`%2e%2e`, `%2E.`) or with path parameters (`..;x`, which servers that drop
them take for `..`), and so is a segment holding `/` or `\\` in any spelling (`%2f`):
what is checked is then byte for byte what is signed and sent (httpx would resolve `..` first).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote

import httpx

from reader.sources import split_location
from reader.sources.hf import REPO_TYPE_PREFIXES, HubFile, split_hf_location

from .addresses import host_key

URL_SCHEMES = ("http", "https")
OBJECT_SCHEMES = ("s3", "gs", "az")
REMOTE_SCHEMES = (*URL_SCHEMES, *OBJECT_SCHEMES, "hf")
DEFAULT_PORTS = {"http": 80, "https": 443}
ANY_PATH = "**"


class Refusal(Exception):
    """Why a location (or a request's URL) is refused: the rule, in words."""


class PatternError(ValueError):
    """An --allow-open pattern that cannot be parsed (raised at start-up)."""


# -- globs ----------------------------------------------------------------------------------------


def _glob(text: str, star: str) -> str:
    """`text` as a regular expression: `*` becomes `star`, everything else is literal."""
    return star.join(re.escape(piece) for piece in text.split("*"))


def path_glob(pattern: str) -> re.Pattern[str]:
    """A `/`-separated glob: `*` within a segment, a segment `**` any number of segments."""
    parts = pattern.split("/")
    regex = ""
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            regex += ".*" if last else "(?:[^/]+/)*"
        else:
            regex += _glob(part, "[^/]*") + ("" if last else "/")
    return re.compile(regex)


def _host_glob(host: str) -> re.Pattern[str] | None:
    """None for a host without a wildcard (a named host); `*` alone matches every host."""
    if "*" not in host:
        return None
    return re.compile(".*" if host == "*" else _glob(host, "[^.]*"))


# -- locations into parts -------------------------------------------------------------------------


def _unquoted(text: str) -> str:
    """`text` percent-decoded until nothing changes (`%252e` is `.` to a server that decodes twice)."""
    for _ in range(4):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    return text


def check_segments(path: str, what: str) -> None:
    """Refusal for a `.`, `..` or empty segment, or one holding a slash, in any spelling."""
    for segment in path.split("/"):
        decoded = _unquoted(segment)
        bare = decoded.partition(";")[0]  # `..;x`: `..` to servers that drop path parameters (Tomcat)
        if bare in ("", ".", "..") or "/" in decoded or "\\" in decoded:
            raise Refusal(
                f"the {what} has a '.', '..' or empty segment, or an encoded slash: it would name "
                "another object than the one checked"
            )


@dataclass(frozen=True)
class UrlParts:
    scheme: str
    host: str  # as addresses.host_key compares it: lowercase, ASCII, an address canonical
    port: int
    path: str  # as sent: percent-encoded by httpx
    query: str | None  # None: no '?'


def parse_url(location: str) -> UrlParts:
    """An http(s) location as the client will send it, or Refusal naming the rule."""
    scheme, rest = split_location(location)
    if "#" in location:
        raise Refusal("a URL with a fragment is refused")
    if "\\" in location:
        raise Refusal("a URL with a backslash is refused")
    authority = re.split(r"[/?]", rest, maxsplit=1)[0]
    after = rest[len(authority) :]
    if "@" in authority:
        raise Refusal("credentials in a URL are refused: opened locations are read with the server's")
    text_path, mark, _ = after.partition("?")
    if not text_path.startswith("/"):
        raise Refusal("the URL names no path")
    check_segments(text_path[1:], "URL's path")
    try:
        url = httpx.URL(location)
    except (httpx.InvalidURL, ValueError, UnicodeError):
        raise Refusal("the location is not a valid URL") from None
    if url.userinfo:
        raise Refusal("credentials in a URL are refused: opened locations are read with the server's")
    host = url.raw_host.decode("ascii")
    if not host or host.startswith(".") or ".." in host:
        raise Refusal("the URL names no host, or a host with an empty label")
    sent_path, _, sent_query = url.raw_path.decode("ascii").partition("?")
    check_segments(sent_path[1:], "URL's path")  # what httpx sends: the same segments, encoded
    port = url.port if url.port is not None else DEFAULT_PORTS[scheme]
    return UrlParts(scheme, host_key(host), port, sent_path, sent_query if mark else None)


@dataclass(frozen=True)
class ObjectParts:
    scheme: str
    bucket: str
    key: str


def parse_object(location: str) -> ObjectParts:
    """An s3://, gs:// or az:// location: bucket (or container) and key, as the reader splits them."""
    scheme, rest = split_location(location)
    if any(c in rest for c in "?#\\"):
        raise Refusal(f"a {scheme}:// location with '?', '#' or '\\' is refused")
    bucket, _, key = rest.partition("/")
    if not bucket or not key:
        raise Refusal(f"the location names no bucket and key: expected {scheme}://bucket/key")
    check_segments(key, "object key")
    return ObjectParts(scheme, bucket, key)


def parse_hub(location: str) -> HubFile:
    """An hf:// location split into repository, revision and path by the reader's own split."""
    rest = location[len("hf://") :]
    if any(c in rest for c in "?#\\"):
        raise Refusal("an hf:// location with '?', '#' or '\\' is refused")
    hub = split_hf_location(location)
    if not hub.repo_id or not hub.path:
        raise Refusal("the location names no repository and path: expected hf://namespace/name/path")
    check_segments(hub.repo_id, "repository")
    check_segments(hub.path, "path in the repository")
    if _unquoted(hub.revision) in ("", ".", ".."):
        raise Refusal("the revision is '.', '..' or empty")
    check_segments(_unquoted(hub.revision), "revision")  # sent encoded, but a server may decode it
    return hub


# -- patterns -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UrlPattern:
    text: str
    scheme: str
    host: str
    host_glob: re.Pattern[str] | None  # None: the host is named
    port: int | None  # None: any port (`:*`)
    path: re.Pattern[str]
    query: re.Pattern[str] | None  # None: no query admitted

    def names(self, host: str, port: int) -> bool:
        """Whether this pattern names `host` (no wildcard) on `port`."""
        return self.host_glob is None and self.host == host and self.port in (None, port)

    def matches(self, parts: UrlParts) -> bool:
        if parts.scheme != self.scheme or self.port not in (None, parts.port):
            return False
        host_ok = self.host == parts.host if self.host_glob is None else self.host_glob.fullmatch(parts.host)
        if not host_ok or not self.path.fullmatch(parts.path):
            return False
        if parts.query is None:
            return True
        return self.query is not None and self.query.fullmatch(parts.query) is not None


def parse_url_pattern(pattern: str) -> UrlPattern:
    scheme, rest = split_location(pattern)
    if "#" in rest or "\\" in rest:
        raise PatternError(f"--allow-open {pattern!r}: a fragment or a backslash has no place in a pattern")
    authority = re.split(r"[/?]", rest, maxsplit=1)[0]
    after = rest[len(authority) :]
    if "@" in authority:
        raise PatternError(f"--allow-open {pattern!r}: credentials have no place in a pattern")
    bracketed = authority.startswith("[")
    if bracketed:
        host, _, port_text = authority[1:].partition("]")
        port_text = port_text.removeprefix(":")
    else:
        host, _, port_text = authority.partition(":")
    if not host:
        raise PatternError(f"--allow-open {pattern!r} names no host")
    if port_text == "*":
        port: int | None = None
    elif port_text == "":
        port = DEFAULT_PORTS[scheme]
    elif port_text.isdigit() and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise PatternError(f"--allow-open {pattern!r}: the port is a number, or '*' for any port")
    path_text, mark, query_text = after.partition("?")
    path_text = path_text or f"/{ANY_PATH}"
    if not path_text.startswith("/"):
        raise PatternError(f"--allow-open {pattern!r}: the path starts with '/'")
    try:
        check_segments(path_text[1:], "pattern's path")
        sent = httpx.URL(f"{scheme}://host{path_text}{mark}{query_text}").raw_path.decode("ascii")
        if "*" not in host:  # the host as the client will name it
            literal = f"[{host}]" if bracketed else host
            host = host_key(httpx.URL(f"{scheme}://{literal}/").raw_host.decode("ascii"))
    except (Refusal, httpx.InvalidURL, ValueError, UnicodeError) as exc:
        raise PatternError(f"--allow-open {pattern!r}: {exc}") from None
    sent_path, _, sent_query = sent.partition("?")
    return UrlPattern(
        text=pattern,
        scheme=scheme,
        host=host.lower(),
        host_glob=_host_glob(host.lower()),
        port=port,
        path=path_glob(sent_path),
        query=re.compile(_glob(sent_query, ".*")) if mark else None,
    )


@dataclass(frozen=True)
class ObjectPattern:
    text: str
    scheme: str
    bucket: re.Pattern[str]
    key: re.Pattern[str]

    def matches(self, parts: ObjectParts) -> bool:
        return (
            parts.scheme == self.scheme
            and self.bucket.fullmatch(parts.bucket) is not None
            and self.key.fullmatch(parts.key) is not None
        )


def parse_object_pattern(pattern: str) -> ObjectPattern:
    scheme, rest = split_location(pattern)
    if any(c in rest for c in "?#\\"):
        raise PatternError(f"--allow-open {pattern!r}: '?', '#' and '\\' have no place in this pattern")
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise PatternError(f"--allow-open {pattern!r} names no bucket")
    try:
        check_segments(key or ANY_PATH, "pattern's key")
    except Refusal as exc:
        raise PatternError(f"--allow-open {pattern!r}: {exc}") from None
    return ObjectPattern(pattern, scheme, re.compile(_glob(bucket, "[^/]*")), path_glob(key or ANY_PATH))


@dataclass(frozen=True)
class HubPattern:
    text: str
    prefix: str
    repo: re.Pattern[str]
    revision: re.Pattern[str] | None  # None: any revision
    path: re.Pattern[str]

    def matches(self, parts: HubFile) -> bool:
        return (
            parts.prefix == self.prefix
            and self.repo.fullmatch(parts.repo_id) is not None
            and (self.revision is None or self.revision.fullmatch(parts.revision) is not None)
            and self.path.fullmatch(parts.path) is not None
        )


def parse_hub_pattern(pattern: str) -> HubPattern:
    rest = pattern[len("hf://") :]
    if any(c in rest for c in "?#\\"):
        raise PatternError(f"--allow-open {pattern!r}: '?', '#' and '\\' have no place in this pattern")
    prefix = next((p for p in REPO_TYPE_PREFIXES if rest.startswith(p)), "")
    rest = rest[len(prefix) :]
    repo, at, after = rest.partition("@")
    revision: re.Pattern[str] | None = None
    if at:
        revision_text, _, path = after.partition("/")
        revision = re.compile(_glob(revision_text, ".*"))
    else:
        segments = rest.split("/")
        repo, path = "/".join(segments[:2]), "/".join(segments[2:])
    if not repo or len(repo.split("/")) > 2:
        raise PatternError(
            f"--allow-open {pattern!r}: expected hf://[datasets/|spaces/]namespace/name[/path]"
        )
    try:
        check_segments(repo, "pattern's repository")
        check_segments(path or ANY_PATH, "pattern's path")
    except Refusal as exc:
        raise PatternError(f"--allow-open {pattern!r}: {exc}") from None
    return HubPattern(pattern, prefix, path_glob(repo), revision, path_glob(path or ANY_PATH))


@dataclass(frozen=True)
class FolderPattern:
    text: str
    folder: str  # absolute, normalised; its real location is taken when a path is checked
    rest: re.Pattern[str]


def parse_folder_pattern(pattern: str) -> FolderPattern:
    """`/srv/models/*.pt2` -> ('/srv/models', '*.pt2'): the folder before the first wildcard, the rest."""
    parts = pattern.split("/")
    fixed = next((i for i, part in enumerate(parts) if "*" in part), len(parts) - 1)
    folder = "/".join(parts[:fixed]) or "/"
    return FolderPattern(
        pattern, posixpath.normpath(os.path.abspath(folder)), path_glob("/".join(parts[fixed:]))
    )


class Patterns:
    """The patterns, parsed once by scheme (a PatternError names the first that cannot be)."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.urls: list[UrlPattern] = []
        self.objects: list[ObjectPattern] = []
        self.hubs: list[HubPattern] = []
        self.folders: list[FolderPattern] = []
        for pattern in patterns:
            scheme = split_location(pattern).scheme
            if "://" not in pattern:
                self.folders.append(parse_folder_pattern(pattern))
            elif scheme in URL_SCHEMES:
                self.urls.append(parse_url_pattern(pattern))
            elif scheme in OBJECT_SCHEMES:
                self.objects.append(parse_object_pattern(pattern))
            elif scheme == "hf":
                self.hubs.append(parse_hub_pattern(pattern))
            else:
                raise PatternError(
                    f"--allow-open {pattern!r}: scheme {scheme!r} is not one of {REMOTE_SCHEMES}"
                )

    @property
    def named(self) -> frozenset[tuple[str, int | None]]:
        """(host, port) of each http(s) pattern that names its host (port None: `:*`)."""
        return frozenset((p.host, p.port) for p in self.urls if p.host_glob is None)

    def admits(self, scheme: str, location: str) -> bool:
        """Whether a remote location lies inside a pattern; Refusal for one no pattern could admit.
        A host and port a pattern names are matched against the patterns naming them only."""
        if scheme in URL_SCHEMES:
            parts = parse_url(location)
            naming = [p for p in self.urls if p.names(parts.host, parts.port)]
            candidates = naming or [p for p in self.urls if p.host_glob is not None]
            return any(p.matches(parts) for p in candidates)
        if scheme in OBJECT_SCHEMES:
            objects = parse_object(location)
            return any(p.matches(objects) for p in self.objects)
        if scheme == "hf":
            hub = parse_hub(location)
            return any(p.matches(hub) for p in self.hubs)
        return False
