"""Which servers remote reads trust: the operating system's store, as pip does, plus what the user adds.

A context trusts, together:
- the system's certificates: on macOS and Windows through `truststore` (the OS verifies each
  chain, so a company CA installed there is trusted); elsewhere OpenSSL's default locations
  (or the first CA file found where distributions keep it, as `truststore` looks), loaded once:
  `truststore` reloads them on every handshake there, which a parallel read pays per connection;
- certifi's bundle (as pip adds it), so a machine without a CA store still reaches public hosts;
- `SSL_CERT_FILE` and `SSL_CERT_DIR` (a file of PEM certificates; a directory in OpenSSL's
  hashed layout, as `openssl rehash` writes it); where OpenSSL's default locations are the
  system store, these replace them, as OpenSSL does;
- an extra bundle (`HttpOptions.ca_bundle`: a PEM file or such a directory).

Building one is slow, so one context per configuration is kept for the life of the process
and shared by every connection of its protocol (http1/'s HTTP/1.1; httpx's HTTP/2).
"""

from __future__ import annotations

import functools
import os
import ssl
import sys

import certifi

from ...errors import SourceError

TRUST_HINT = "trust its CA with SSL_CERT_FILE, SSL_CERT_DIR or --ca-bundle (PT2SERVE_CA_BUNDLE)"


def verified_context(ca_bundle: str | None = None, *, http2: bool = False) -> ssl.SSLContext:
    """The verified client context for this configuration (the environment read now).

    HTTP/2 clients get a context of their own: httpcore sets the ALPN protocols of the context
    it is given, and a shared one would then offer h2 to http1/'s HTTP/1.1 connections."""
    cert_file, cert_dir = os.environ.get("SSL_CERT_FILE") or None, os.environ.get("SSL_CERT_DIR") or None
    return _context(ca_bundle, cert_file, cert_dir, ("h2", "http/1.1") if http2 else ("http/1.1",))


@functools.lru_cache(maxsize=16)
def _context(
    ca_bundle: str | None, cert_file: str | None, cert_dir: str | None, alpn: tuple[str, ...]
) -> ssl.SSLContext:
    context = _system_context()
    context.set_alpn_protocols(list(alpn))
    context.load_verify_locations(cafile=certifi.where())
    for what, path in (
        ("SSL_CERT_FILE", cert_file),
        ("SSL_CERT_DIR", cert_dir),
        ("the CA bundle", ca_bundle),
    ):
        if path is not None:
            _load(context, path, what)
    return context


def _system_context() -> ssl.SSLContext:
    if sys.platform in ("darwin", "win32"):
        import truststore

        return truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies chains and host names
    try:  # truststore's own search (OpenSSL's defaults, else the distributions' usual files)
        from truststore._openssl import _configure_context
    except ImportError:  # a truststore that moved it: OpenSSL's defaults alone
        context.set_default_verify_paths()
    else:
        with _configure_context(context):
            pass
    return context


def _load(context: ssl.SSLContext, path: str, what: str) -> None:
    try:
        if os.path.isdir(path):
            context.load_verify_locations(capath=path)
        else:
            context.load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError) as exc:
        raise SourceError(f"{what} {path!r} cannot be used: {exc.strerror or exc}") from None


def untrusted_certificate(error: BaseException) -> str | None:
    """Why a connection failed certificate verification, if that is what `error` comes from."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return getattr(current, "verify_message", None) or str(current)
        current = current.__cause__ or current.__context__
    return None


def certificate_refusal(error: BaseException, host: str | None) -> str | None:
    """The message for a server whose certificate is not trusted (None: not a certificate problem)."""
    reason = untrusted_certificate(error)
    if reason is None:
        return None
    return f"certificate of {host or 'the server'} not trusted ({reason}); {TRUST_HINT}"
