"""The cache key of a location: everything that names the object, and no signature.

Two objects must never share a key: an offline or stale-if-error open hands out the version cached
last under it. So:

- s3://, gs://, az:// and hf:// locations carry no credentials (those come from the environment) and
  every character names the object (`?versionId=1` in an s3:// key is part of the key's name, an
  hf:// revision picks the commit): the key is the location itself.
- An http(s) URL is its key byte for byte (userinfo, host, port, path, query: a download token may
  pick the object too), except for the fragment (never sent) and the parameters of a signature over
  the rest of the URL, which authenticate a request for the object the rest names, so a URL signed
  again is the same object: `SIGNATURE_PREFIXES` (S3 SigV4 `X-Amz-*`, GCS V4 `X-Goog-*`), and
  `SIGNATURE_SCHEMES`, each left out only when its marker parameter is present (an Azure SAS with
  `sig`, S3 and GCS V2 with their access id, CloudFront with `Key-Pair-Id`), matched without regard
  to case after percent-decoding.

A key may hold credentials other than signatures (a token, a password): the cache writes only its
digest (`key_digest`), and shows a location as `redact_location` does, without query or userinfo.
"""

from __future__ import annotations

import hashlib
from urllib.parse import unquote_plus

from ..sources.location import split_location

KEY_FORMAT = 2  # 1: locations keyed without their query (folders of it are never opened again)

SIGNATURE_PREFIXES = ("x-amz-", "x-goog-")  # S3 SigV4 presigned URLs, GCS V4 signed URLs
AZURE_SAS = frozenset(
    {"sv", "ss", "srt", "sp", "se", "st", "spr", "sip", "sig", "sr", "si", "sdd", "ses", "skoid", "sktid",
     "skt", "ske", "sks", "skv", "saoid", "suoid", "scid", "sduoid", "rscc", "rscd", "rsce", "rscl", "rsct"}
)  # fmt: skip
SIGNATURE_SCHEMES = {  # marker parameter -> the parameters of that scheme
    "sig": AZURE_SAS,  # Azure shared access signature (service, account, user delegation)
    "awsaccesskeyid": frozenset({"awsaccesskeyid", "signature", "expires"}),  # S3 SigV2 presigned
    "googleaccessid": frozenset({"googleaccessid", "signature", "expires"}),  # GCS V2 signed URL
    "key-pair-id": frozenset({"key-pair-id", "signature", "expires", "policy"}),  # CloudFront
}


def cache_key(location: str) -> str:
    """The key the cache keeps `location` under (see the module docstring)."""
    scheme, rest = split_location(location)
    if scheme not in ("http", "https"):
        return location
    url, question, query = rest.split("#", 1)[0].partition("?")
    if not question:
        return f"{scheme}://{url}"
    kept = _kept_parameters(query.split("&"))
    return f"{scheme}://{url}?{'&'.join(kept)}" if kept else f"{scheme}://{url}"


def _kept_parameters(pairs: list[str]) -> list[str]:
    names = [unquote_plus(pair.partition("=")[0]).lower() for pair in pairs]
    dropped: set[str] = set()
    for marker, scheme in SIGNATURE_SCHEMES.items():
        if marker in names:
            dropped |= scheme
    kept = []
    for pair, name in zip(pairs, names, strict=True):
        if name not in dropped and not name.startswith(SIGNATURE_PREFIXES):
            kept.append(pair)
    return kept


def key_digest(key: str) -> str:
    """What the cache writes of a key (meta.json): it tells keys apart and gives none back."""
    return hashlib.sha256(f"{KEY_FORMAT}:{key}".encode()).hexdigest()
