"""Service settings, from the command line and PT2SERVE_* environment variables."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEMO_ARCHIVE = pathlib.Path(__file__).resolve().parent / "demo" / "demo.pt2"
MAX_HEADER_BYTES = 64 << 10  # a request's head (request line and header fields), as h11's default
# The service streams in smaller chunks than the library's 4 MiB: many bodies are in flight at once.
CHUNK_SIZE = 1 << 20


@dataclass(frozen=True)
class ArchiveSpec:
    id: str
    location: str


@dataclass(frozen=True)
class Settings:
    archives: tuple[ArchiveSpec, ...] = ()
    api_token: str | None = None
    url_signing_key: str | None = None  # None: derived from api_token (see app/signing.py)
    signed_url_ttl: int = 900  # seconds a signed URL lives unless the request asks for less
    cors_origins: tuple[str, ...] = ()
    max_streams: int = 256  # concurrent body streams; more get 503 + Retry-After
    revalidate_seconds: float = 30.0  # how often remote archives are checked for changes
    lazy: bool = False  # open archives on first use instead of at start-up
    chunk_size: int = CHUNK_SIZE
    upstream_timeout: float = 30.0  # seconds to wait for a remote archive's server to answer or send
    upstream_attempts: int = 5  # tries per upstream request (retries on 5xx, 429, resets)
    upstream_budget: float | None = None  # seconds one upstream open or read may take in all (None: no cap)
    retry_failed_after: float = 10.0  # an archive that failed to open is retried at most this often
    # big upstream reads as parts over several connections (memory per stream: parts x part size);
    # None: the library's default (reader.sources.HttpOptions: the one place these are set)
    parallel_parts: int | None = None
    part_size: int | None = None
    parallel_above: int | None = None
    access_log: bool = False  # uvicorn's per-request log line (issue 12: 1,710 vs 3,116 layouts/s without)
    version_grace_seconds: float = 300.0  # how long a replaced archive version is still served
    digests_ahead: str = "local"  # compute every digest after opening: local | all | off
    digest_inline_max: int = 1 << 20  # remote tensors up to this size get their digest before the headers
    ca_bundle: str | None = None  # CA certificates trusted besides the system's (PEM file or hashed dir)
    # locations a client may open (POST /archives/open, the viewer's Open box): patterns matched part
    # by part (app/open_patterns.py's grammar);
    # none: nothing can be opened from a request (app/open_policy.py, app/addresses.py)
    allow_open: tuple[str, ...] = ()
    open_max: int = 16  # opened archives kept; past it the least recently used is closed
    open_rate: float = 0.5  # opens per second per client (token bucket) ...
    open_burst: int = 10  # ... with this many at once
    open_concurrency: int = 4  # opens in progress at once; more get 503 + Retry-After
    # Host names a token-less service answers on a loopback address besides the loopback names
    # (DNS rebinding: app/hosts.py); "*.example.com" names its subdomains, "*" any host
    allowed_hosts: tuple[str, ...] = ()
    # addresses (or networks) of reverse proxies whose X-Forwarded-For names the client
    trusted_proxies: tuple[str, ...] = ()
    max_header_bytes: int = MAX_HEADER_BYTES  # read by app/protocol.py from the environment

    @classmethod
    def from_environment(
        cls, archives: Sequence[str] = (), environ: Mapping[str, str] | None = None
    ) -> Settings:
        env = os.environ if environ is None else environ
        specs = list(archives) or [
            part for part in env.get("PT2SERVE_ARCHIVES", "").split(",") if part.strip()
        ]
        origins = tuple(o.strip() for o in env.get("PT2SERVE_CORS_ORIGINS", "").split(",") if o.strip())
        return cls(
            archives=parse_archive_specs(specs) if specs else (ArchiveSpec("demo", str(DEMO_ARCHIVE)),),
            api_token=env.get("PT2SERVE_API_TOKEN") or None,
            url_signing_key=env.get("PT2SERVE_URL_SIGNING_KEY") or None,
            signed_url_ttl=int(env.get("PT2SERVE_SIGNED_URL_TTL", "900")),
            cors_origins=origins,
            max_streams=int(env.get("PT2SERVE_MAX_STREAMS", "256")),
            revalidate_seconds=float(env.get("PT2SERVE_REVALIDATE_SECONDS", "30")),
            lazy=env.get("PT2SERVE_LAZY", "").lower() in ("1", "true", "yes"),
            chunk_size=int(env.get("PT2SERVE_CHUNK_SIZE", str(CHUNK_SIZE))),
            upstream_timeout=float(env.get("PT2SERVE_UPSTREAM_TIMEOUT", "30")),
            upstream_attempts=int(env.get("PT2SERVE_UPSTREAM_ATTEMPTS", "5")),
            version_grace_seconds=float(env.get("PT2SERVE_VERSION_GRACE", "300")),
            digest_inline_max=int(env.get("PT2SERVE_DIGEST_INLINE_MAX", str(1 << 20))),
            digests_ahead=_choice(env.get("PT2SERVE_DIGESTS_AHEAD", "local"), ("local", "all", "off")),
            upstream_budget=float(env["PT2SERVE_UPSTREAM_BUDGET"])
            if env.get("PT2SERVE_UPSTREAM_BUDGET")
            else None,
            parallel_parts=_optional_int(env.get("PT2SERVE_PARALLEL_PARTS")),
            part_size=_optional_int(env.get("PT2SERVE_PART_SIZE")),
            parallel_above=_optional_int(env.get("PT2SERVE_PARALLEL_ABOVE")),
            access_log=env.get("PT2SERVE_ACCESS_LOG", "").lower() in ("1", "true", "yes"),
            ca_bundle=ca_bundle_from(env),
            allow_open=allow_open_from(env),
            open_max=int(env.get("PT2SERVE_OPEN_MAX", "16")),
            open_rate=float(env.get("PT2SERVE_OPEN_RATE", "0.5")),
            open_burst=int(env.get("PT2SERVE_OPEN_BURST", "10")),
            open_concurrency=int(env.get("PT2SERVE_OPEN_CONCURRENCY", "4")),
            allowed_hosts=_list(env.get("PT2SERVE_ALLOWED_HOSTS", "")),
            trusted_proxies=_list(env.get("PT2SERVE_TRUSTED_PROXIES", "")),
            max_header_bytes=max_header_bytes_from(env),
        )


def ca_bundle_from(env: Mapping[str, str]) -> str | None:
    """PT2SERVE_CA_BUNDLE: the extra CA bundle for remote reads (the service's and the CLI's)."""
    return env.get("PT2SERVE_CA_BUNDLE") or None


def allow_open_from(env: Mapping[str, str]) -> tuple[str, ...]:
    """PT2SERVE_ALLOW_OPEN: patterns separated by newlines or spaces (a pattern holds neither); a
    pattern that cannot be parsed is a ValueError here, at start-up (app/open_patterns.py)."""
    patterns = tuple(env.get("PT2SERVE_ALLOW_OPEN", "").split())
    if patterns:
        from .open_patterns import Patterns

        Patterns(patterns)  # PatternError, a ValueError, names the pattern and what is wrong
    return patterns


def max_header_bytes_from(env: Mapping[str, str]) -> int:
    """PT2SERVE_MAX_HEADER_BYTES: the most bytes a request's head may take (431 past it)."""
    return int(env.get("PT2SERVE_MAX_HEADER_BYTES") or MAX_HEADER_BYTES)


def _list(value: str) -> tuple[str, ...]:
    """A list setting: items separated by commas or white space."""
    return tuple(value.replace(",", " ").split())


def parse_archive_specs(specs: Sequence[str]) -> tuple[ArchiveSpec, ...]:
    """`id=LOCATION` or `LOCATION` (the id is then the file stem); ids must be unique."""
    result: list[ArchiveSpec] = []
    for spec in specs:
        spec = spec.strip()
        head, eq, tail = spec.partition("=")
        if eq and "://" not in head and "/" not in head and head:
            archive_id, location = head, tail
        else:
            archive_id, location = stem_of(spec), spec
        if not location:
            raise ValueError(f"archive spec {spec!r} has no location")
        if "@" in archive_id:
            raise ValueError(f"archive id {archive_id!r} has an '@', which URLs use for versions")
        if any(existing.id == archive_id for existing in result):
            raise ValueError(f"archive id {archive_id!r} is given twice; name them with id=LOCATION")
        result.append(ArchiveSpec(archive_id, location))
    return tuple(result)


def _choice(value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{value!r} is not one of {', '.join(allowed)}")
    return value


def stem_of(location: str) -> str:
    """An archive's default id: its file name without the suffix that says what it is
    (`gpt2.pt2` -> gpt2, `pytorch_model.bin.index.json` -> pytorch_model)."""
    name = location.rstrip("/").split("?", 1)[0].rsplit("/", 1)[-1]
    for suffix in (".pt2", ".bin.index.json", ".index.json"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            break
    return name.replace("@", "-")  # '@' separates an id from a version in URLs


def _optional_int(text: str | None) -> int | None:
    """A setting's number, or None where it is unset (the library's default then applies)."""
    return int(text) if text else None
