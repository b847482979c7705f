"""What an archive does with the one source it reads (a file, a URL, a sharded checkpoint's
index and shards together): ask whether it is still the one opened, close it, `async with`."""

from __future__ import annotations

from typing import Self

from .sources import ByteSource


class SourceBacked:
    source: ByteSource

    async def revalidate(self) -> bool:
        """True if what was opened is still there unchanged (a cheap conditional request remotely)."""
        return await self.source.revalidate()

    async def close(self) -> None:
        await self.source.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
