"""Which locations a client may open (--allow-open PATTERN): one rule per refusal, each named.

Patterns and locations are parsed into their parts by app/open_patterns.py (its docstring is the
grammar); without a pattern nothing can be opened. A path opens only through a folder pattern, once
every symbolic link is followed.

For http(s), what a location may reach once it matches is also the address rule's
(app/addresses.py). A pattern whose HOST has no wildcard names that host: the host is exempt from
the address rule on the pattern's port (any port for `:*`), and a location (or redirect hop) on
that host and port must then match one of the patterns naming it, not a wildcard one. Every
request an opened http(s) archive makes, each redirect hop and each later read, is checked against
the patterns again (`check_url`, the reader's `HttpOptions.check_url`). s3://, gs://, az:// and hf://
go to the endpoints the operator configured, with the server's own credentials.

A refusal names its rule (no pattern matches, a `..`, credentials in the URL ...) and says nothing
of what lies behind a pattern; a refused redirect hop's URL goes to the log only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from reader import HostRefused
from reader.sources import split_location

from .errors import ApiError
from .open_patterns import REMOTE_SCHEMES, URL_SCHEMES, Patterns, Refusal

log = logging.getLogger("pt2serve")

MAX_LOCATION = 4096


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
        self.parsed = Patterns(self.patterns)

    @property
    def enabled(self) -> bool:
        return bool(self.patterns)

    @property
    def remote(self) -> bool:
        return bool(self.parsed.urls or self.parsed.objects or self.parsed.hubs)

    @property
    def named(self) -> frozenset[tuple[str, int | None]]:
        return self.parsed.named

    def check(self, location: str) -> Target:
        """The location to open, or the ApiError (404 when opening is off, else 403) naming the rule."""
        if not self.enabled:
            raise ApiError(404, "opening_disabled", "opening is off: the service runs without --allow-open")
        if len(location) > MAX_LOCATION or any(ord(c) < 32 or ord(c) == 127 for c in location):
            raise refused("the location is too long or holds control characters")
        if "://" not in location:
            return Target(self._check_path(location), http=False)
        scheme = split_location(location).scheme
        if scheme not in REMOTE_SCHEMES:
            schemes = ", ".join(REMOTE_SCHEMES)
            raise refused(f"scheme {scheme!r} is not one an archive is read from ({schemes})")
        try:
            admitted = self.parsed.admits(scheme, location)
        except Refusal as exc:
            raise refused(str(exc)) from None
        if not admitted:
            raise refused(f"the location matches no --allow-open pattern (allowed: {self._allowed()})")
        return Target(location, http=scheme in URL_SCHEMES)

    def check_url(self, url: str) -> None:
        """`HttpOptions.check_url` for opened http(s) archives: every request's URL, redirect hops
        included, must lie inside the patterns; else HostRefused (the URL goes to the log only)."""
        try:
            admitted = self.parsed.admits(split_location(url).scheme, url)
        except Refusal as exc:
            log.warning("opened location: a request to %s refused: %s", url, exc)
            admitted = False
        else:
            if not admitted:
                log.warning(
                    "opened location: a request to %s refused: it matches no --allow-open pattern", url
                )
        if not admitted:
            raise HostRefused("a redirect leads outside the --allow-open patterns")

    def _check_path(self, path: str) -> str:
        if not self.parsed.folders:
            raise refused(
                f"paths are refused: no --allow-open pattern is a folder (allowed: {self._allowed()})"
            )
        if not os.path.isabs(path):
            raise refused("a path must be absolute")
        if ".." in path.replace("\\", "/").split("/"):
            raise refused("a path with '..' is refused")
        real = os.path.realpath(path)
        inside_any = False
        for pattern in self.parsed.folders:
            real_folder = os.path.realpath(pattern.folder)
            if os.path.commonpath([real, real_folder]) != real_folder:
                continue
            inside_any = True
            if pattern.rest.fullmatch(os.path.relpath(real, real_folder)):
                return real
        if inside_any:
            raise refused(f"{path} matches no --allow-open pattern (allowed: {self._allowed()})")
        raise refused(
            f"{path} is outside every folder an --allow-open pattern names, once symbolic links are followed"
        )

    def _allowed(self) -> str:
        return ", ".join(self.patterns)
