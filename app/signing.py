"""Short-lived signed URLs: a GET or HEAD of exactly one path and query, until an expiry time,
without the API token (like S3 presigned URLs). For links a browser follows by itself
(downloads) and for curl or devices handed a URL.

A signed URL is the original URL with `exp=<unix seconds>&sig=<hex>` appended, where
sig = HMAC-SHA256(key, "GET\\n" + path + "\\n" + query up to and including exp). The path is
the decoded path (as the server routes it); the query is kept byte for byte, so any change to
the path, the query, its order or the expiry breaks the signature. Verified with
hmac.compare_digest (constant time).

A signed URL grants one read and nothing more, so no URL is signed (nor accepted) for the routes
that grant access themselves: `/sign` (it would mint new URLs, outliving its own expiry) and
`/auth` (the edge proxy's access check). A path to sign has no `.` or `..` segment, raw or encoded.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

SIG = "sig"
EXP = "exp"
KEY_CONTEXT = b"pt2serve signed URLs v1"
NEVER_SIGNED = frozenset({"/sign", "/auth"})  # routes that grant access: a signature never reaches them


def grants_access(path: str) -> bool:
    """Whether the decoded `path` names a route in NEVER_SIGNED, however its slashes are spelled."""
    return "/" + "/".join(segment for segment in path.split("/") if segment) in NEVER_SIGNED


def derive_key(token: str) -> bytes:
    """The signing key when none is configured: derived from the API token, so replicas sharing a
    token accept each other's URLs, and rotating the token revokes every outstanding URL."""
    return hmac.new(token.encode(), KEY_CONTEXT, hashlib.sha256).digest()


class SignatureRefused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class UrlSigner:
    key: bytes
    max_ttl: int = 7 * 24 * 3600

    def _mac(self, path: str, query: str) -> str:
        message = f"GET\n{path}\n{query}".encode()
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()

    def sign(self, url: str, ttl: int, now: float | None = None) -> tuple[str, int]:
        """`url` is a same-origin path with an optional query ("/archives/a/tensors/w/data?x=1")."""
        parts = urlsplit(url)
        if parts.scheme or parts.netloc or not parts.path.startswith("/") or parts.fragment:
            raise ValueError("path must be a path on this service, like /archives/a/tensors/w/data")
        if any(key in (SIG, EXP) for key in parse_qs(parts.query, keep_blank_values=True)):
            raise ValueError("path must not carry exp or sig already")
        path = unquote(parts.path)
        if {".", ".."} & set(path.split("/")):
            raise ValueError("path must not hold . or .. segments")
        if grants_access(path):
            raise ValueError(f"{path} grants access itself: a signed URL never does")
        expires = int(now if now is not None else time.time()) + max(1, min(ttl, self.max_ttl))
        query = f"{parts.query}&" if parts.query else ""
        query += f"{EXP}={expires}"
        sig = self._mac(path, query)
        return f"{parts.path}?{query}&{SIG}={sig}", expires

    def verify(self, path: str, raw_query: str, now: float | None = None) -> None:
        """Raise SignatureRefused unless the query ends with a valid, unexpired signature for a
        path a signature may open."""
        if grants_access(path):
            raise SignatureRefused("bad_signature", f"a signed URL never opens {path}")
        signed, sep, sig = raw_query.rpartition(f"{SIG}=")
        if not sep or (signed and not signed.endswith("&")) or "&" in sig:
            raise SignatureRefused("bad_signature", "the signature must be the last query parameter")
        signed = signed[:-1] if signed else signed
        expected = self._mac(path, signed)
        if not hmac.compare_digest(sig.encode(), expected.encode()):
            raise SignatureRefused("bad_signature", "the URL's signature does not match it")
        values = parse_qs(signed, keep_blank_values=True).get(EXP, [])
        if len(values) != 1 or not values[0].isdigit():
            raise SignatureRefused("bad_signature", "a signed URL needs exactly one exp")
        if int(values[0]) < (now if now is not None else time.time()):
            raise SignatureRefused("signature_expired", "the signed URL has expired; ask for a new one")
