"""What callers tune for remote reads: HttpOptions and S3Settings.

They live apart from the sources that use them so that naming them (a signature, a service's
settings, `open_archive(http_options=...)`) imports no HTTP client and no AWS SDK: a process that
only reads local archives never loads httpx, h11 or botocore.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

DEFAULT_REGION = "us-east-1"

# host, port -> the IP addresses to connect to (raise to refuse the host): see HttpOptions.resolve_host
ResolveHost = Callable[[str, int], Awaitable[Sequence[str]]]
# a request's URL, exactly as it is sent -> None, or raise HostRefused: see HttpOptions.check_url
CheckUrl = Callable[[str], None]


@dataclass(frozen=True)
class HttpOptions:
    """Knobs for remote reads; the defaults suit object storage over a WAN."""

    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    max_attempts: int = 5  # per request, including the first
    backoff_base: float = 0.2  # seconds; doubles per attempt, jittered
    backoff_cap: float = 5.0
    max_retry_after: float = 30.0  # longest Retry-After we will wait
    time_budget: float | None = None  # seconds one open/read/stream may take in all (None: no limit)
    full_body_cap: int = 16 << 20  # a server that ignores Range may send us this much, no more
    http2: bool = False
    ca_bundle: str | None = None  # PEM file or hashed directory trusted besides the system's (tls.py)
    headers: Mapping[str, str] = field(default_factory=dict)
    # Reads longer than parallel_above are fetched as part_size parts over up to parallel_parts
    # connections at once (servers cap each connection; memory: parallel_parts x part_size).
    # parallel_parts=1 turns it off.
    parallel_parts: int = 8
    part_size: int = 8 << 20
    parallel_above: int = 16 << 20
    # A connection whose first 4 MiB arrive this fast (bytes/s) is not capped: the read stays on
    # one connection (more cost CPU for nothing). None: always parallel above parallel_above.
    fast_connection: float | None = 250e6
    # Ask a server for several ranges a request (multipart/byteranges) where a sharded load needs
    # scattered runs (column blocks). Then each column block is read as its runs (the parts of
    # multi-range requests: its share) or as the rows they lie in (up to world_size x the bytes, no
    # parts), whichever costs less at the link's rate, timed once (loading/blockplan.py). False: one
    # range a request, the rows always.
    multi_range: bool = True
    # Seconds of client CPU one part of a multi-range answer costs, weighed against the rows' bytes
    # (bench/README.md, `shard.py`, has the figures from loopback nginx). None: timed once a source,
    # with the link's rate (sources/transport/speed.py); 0: a column block's parts always.
    part_cost: float | None = None
    # A long streamed body is received on a thread (http1/receiver.py): the consumer's work on the loop
    # overlaps the socket reads. A consumer that only relays each chunk (the service writing it to
    # its own client) runs faster with the body received on the loop: False.
    receive_thread: bool = True
    # Asked for every host a connection is made to, redirect targets included, at connect time: it
    # answers the addresses to connect to (and the connection goes to one of those, so a name that
    # resolves differently a moment later changes nothing), or raises to refuse the host. Through a
    # proxy it is asked about the target host, and the proxy is asked for a CONNECT tunnel to the
    # first address it answered (http too), so the proxy resolves nothing. None: the system resolver.
    # Needs the default transport (http2=False). The service checks opened locations with it.
    resolve_host: ResolveHost | None = None
    # Asked with the URL of every request before it is sent (signed, redirect hops included, as
    # the client will send it: `str(httpx.Request.url)`, its path's `.` and `..` already resolved):
    # raise reader.HostRefused to refuse it. The service checks opened locations' patterns with it.
    check_url: CheckUrl | None = None

    def __post_init__(self) -> None:
        if self.part_cost is not None and self.part_cost < 0:
            raise ValueError("part_cost must be >= 0")
        if self.parallel_parts < 1 or self.part_size < 1 or self.parallel_above < 0:
            raise ValueError("parallel_parts and part_size must be >= 1, parallel_above >= 0")
        if self.http2 and self.resolve_host is not None:
            raise ValueError("resolve_host needs the default transport: http2=False")


@dataclass(frozen=True)
class S3Settings:
    """Explicit S3 settings (tests, embedding code); no keys means anonymous requests.

    `endpoint` is an S3-compatible server's URL; `addressing_style` is "path", "virtual" or None
    (botocore's choice: path-style for custom endpoints, virtual-hosted on AWS)."""

    region: str = DEFAULT_REGION
    endpoint: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    addressing_style: str | None = None

    def __post_init__(self) -> None:
        if self.addressing_style not in (None, "auto", "path", "virtual"):
            raise ValueError(f"addressing_style {self.addressing_style!r} is not path, virtual or auto")

    @property
    def anonymous(self) -> bool:
        return not (self.access_key and self.secret_key)
