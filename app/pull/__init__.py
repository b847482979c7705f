"""`pull`: mirror an archive version into a directory, fetching only tensors whose digest changed.

From a pt2serve server (URL = an archive's base URL `http://host/archives/{id}`, or its
`/manifest` URL) the manifest names every tensor's SHA-256 and versioned data URL
(served.py); straight from an archive (a path, an `s3://` URI or an `http(s)://…/x.pt2`
URL) the same reader computes the digests while it streams the bytes (direct.py). Every
byte written is checked against its digest, partial downloads resume, and the directory
switches to the new version in one rename (mirror.py: the layout and the guarantees;
update.py: what one run reuses, fetches and switches).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import urllib.parse
from collections.abc import Iterator, Sequence

import reader
from reader.sources import HttpOptions, make_client

from .direct import FromArchive
from .mirror import Mirror
from .served import FromServer
from .update import ProgressFactory, PullReport, update

__all__ = ["PullReport", "is_served_url", "pull"]


def is_served_url(url: str) -> bool:
    """A pt2serve archive URL (or manifest URL), as opposed to an archive file itself."""
    parts = urllib.parse.urlsplit(url)
    return parts.scheme in ("http", "https") and not parts.path.endswith(".pt2")


async def pull(
    url: str,
    directory: str | os.PathLike[str],
    *,
    model: str | None = None,
    prefix: str | None = None,
    names: Sequence[str] | None = None,
    progress: ProgressFactory | None = None,
    http_options: HttpOptions | None = None,
) -> PullReport:
    """Bring `directory` to the version of the archive at `url` (see the module docstring).

    Raises reader.SourceError (unreachable, HTTP errors, another pull running on DIR),
    reader.IntegrityError (bytes that do not match their digest twice over) or another
    reader.ReaderError.
    """
    mirror = Mirror(directory)
    with _locked(mirror):
        if is_served_url(url):
            async with make_client(http_options or HttpOptions()) as client:
                server = FromServer(client, url)
                return await update(mirror, await server.manifest(model, prefix, names), server, progress)
        async with reader.open_archive(url, http_options=http_options) as archive:
            direct = FromArchive(archive, mirror)
            return await update(mirror, await direct.manifest(model, prefix, names), direct, progress)


@contextlib.contextmanager
def _locked(mirror: Mirror) -> Iterator[None]:
    """One pull per directory at a time."""
    with open(os.path.join(mirror.work, "lock"), "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise reader.SourceError(f"{mirror.root}: another pull is updating this directory") from None
        yield
