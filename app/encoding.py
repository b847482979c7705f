"""Content codings for text bodies (JSON, HTML, JS, CSS): chosen from Accept-Encoding, one ETag each.

zstd (the `zstandard` package) and gzip (the standard library). Tensor bytes, bundles and Range
answers are never encoded: they are already dense, and a Range of an encoded body would be a
range of bytes no client can decode alone. Bodies below MIN_SIZE go out as they are (a layout
JSON, a 304): the header would cost more than it saves.

Each coding is its own representation (RFC 9110 §8.4): its ETag is the identity ETag with the
coding's name added inside the quotes, so a cache never answers a gzip client with a 304 meant
for the identity bytes, and every response that may be encoded says `Vary: Accept-Encoding`.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator

try:  # a maintained binding of the reference zstd library; gzip alone without it
    import zstandard
except ImportError:  # pragma: no cover - a dependency of the service; kept optional for embedders
    zstandard = None

IDENTITY = "identity"
GZIP = "gzip"
ZSTD = "zstd"
OFFERED = (ZSTD, GZIP) if zstandard is not None else (GZIP,)  # the server's preference, best first
MIN_SIZE = 1024
GZIP_LEVEL = 6
ZSTD_LEVEL = 3
VARY = ("vary", "Accept-Encoding")


def choose(accept_encoding: str | None) -> str:
    """The coding to send for this Accept-Encoding (RFC 9110 §12.5.3): the best of ours the client
    gives the highest non-zero weight; `identity` when none (identity is never refused here)."""
    if not accept_encoding:
        return IDENTITY
    weights: dict[str, float] = {}
    for item in accept_encoding.split(","):
        name, _, params = item.partition(";")
        name = name.strip().lower()
        weight = 1.0
        params = params.strip().lower()
        if params.startswith("q="):
            try:
                weight = float(params[2:])
            except ValueError:
                weight = 0.0
        if name:
            weights[name] = weight
    best, best_weight = IDENTITY, 0.0
    for coding in OFFERED:
        weight = weights.get(coding, weights.get("*", 0.0))
        if weight > best_weight:
            best, best_weight = coding, weight
    return best


def tagged(etag: str, coding: str) -> str:
    """The ETag of `coding`'s representation: `"abc"` → `"abc-gzip"` (identity keeps its own)."""
    if coding == IDENTITY:
        return etag
    return f'{etag[:-1]}-{coding}"'


def compress(body: bytes, coding: str) -> bytes:
    if coding == GZIP:
        encoder = _gzip()
        return encoder.compress(body) + encoder.flush()
    if coding == ZSTD:
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(body)
    return body


def _gzip() -> zlib._Compress:  # type: ignore[name-defined]
    return zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # wbits 31: the gzip container


def stream(pieces: Iterable[bytes], coding: str) -> Iterator[bytes]:
    """`pieces` encoded as they come (one encoder for the whole stream): memory stays one piece."""
    if coding == IDENTITY:
        yield from pieces
        return
    if coding == GZIP:
        encoder = _gzip()
        for piece in pieces:
            out = encoder.compress(piece)
            if out:
                yield out
        yield encoder.flush()
        return
    writer = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compressobj()
    for piece in pieces:
        out = writer.compress(piece)
        if out:
            yield out
    yield writer.flush()
