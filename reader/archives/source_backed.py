"""What an archive does with the one source it reads (a file, a URL, a sharded checkpoint's
index and shards together): count what it read, ask whether it is still the one opened, close it,
`async with`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from ..sources import ByteSource
from .deprecated import warn_renamed

if TYPE_CHECKING:
    from ..cache import Stale


class SourceBacked:
    source: ByteSource

    @property
    def stats(self) -> dict[str, dict[str, int]]:
        return self.source.stats.to_dict()

    @property
    def revalidated(self) -> bool:
        """Whether the origin has said these bytes are current: True for local files, remote opens
        without a cache and cached opens the origin confirmed; False for offline opens and for
        stale-if-error ones (the origin could not be reached; see `stale`)."""
        return self.source.revalidated

    @property
    def stale(self) -> Stale | None:
        """Set when a cached version was opened because the origin could not be reached: its
        location, version, age and why (docs/cache.md, stale-if-error); None otherwise."""
        return self.source.stale

    async def revalidate(self) -> bool:
        return await self.source.revalidate()

    async def close(self) -> None:
        await self.source.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def location(self) -> str:
        """Deprecated: `source.location`."""
        warn_renamed("archive.location", "archive.source.location")
        return self.source.location

    @property
    def identity(self) -> str:
        """Deprecated: `source.identity`."""
        warn_renamed("archive.identity", "archive.source.identity")
        return self.source.identity
