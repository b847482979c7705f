"""What a client is told when a location it opened fails: the rule, never what lies behind it.

An upstream's status, host or address in an answer would make the Open box an oracle for what
lies behind the patterns (which ports answer, with what, at which address), so a client-opened
archive's failure is told as its kind only: not found or refused by its server, no answer, not a
.pt2 archive, a location refused by the address rule or the patterns. A refusal's (HostRefused)
and a malformed location's (LocationError) messages name only the rule or what the client sent,
and are told as they are. The details go to the server's log. Configured archives keep their
detailed errors: the operator chose them.
"""

from __future__ import annotations

import reader

# kind -> the error code and the message a client is told (None: the error's own); first match wins
OPENED_FAILURES: list[tuple[type[Exception], str, str | None]] = [
    (reader.HostRefused, "open_refused", None),
    (reader.LocationError, "bad_location", None),
    (reader.SourceChanged, "archive_changed", "the archive changed while it was read; retry"),
    (reader.OriginUnreachable, "upstream_error", "the location could not be read: its server did not answer"),
    (reader.SourceError, "upstream_error",
     "the location could not be read: its server does not have it, refused it, or failed"),
    (reader.IntegrityError, "integrity_error", "the archive's bytes failed their CRC or length check"),
    (reader.ArchiveFormatError, "archive_format_error", "the location is not a valid .pt2 archive"),
    (reader.ReaderError, "archive_format_error", "the location could not be read as an archive"),
]  # fmt: skip


def public_failure(exc: reader.ReaderError) -> tuple[str, str]:
    """The error code and message a client is told of `exc`, an opened location's failure."""
    return next(
        (code, str(exc) if message is None else message)
        for kind, code, message in OPENED_FAILURES
        if isinstance(exc, kind)
    )
