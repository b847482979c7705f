"""HeldBytes: a run of an object's bytes already in memory, so later reads inside it cost nothing."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class HeldBytes:
    start: int
    data: bytes

    def covers(self, start: int, end: int) -> bool:
        return self.start <= start and end <= self.start + len(self.data)

    def slice(self, start: int, end: int) -> memoryview:
        """A view, not a copy: configs are sliced twice on their way to the JSON parser."""
        return memoryview(self.data)[start - self.start : end - self.start]
