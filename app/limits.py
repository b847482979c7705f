"""A cap on concurrent body streams: past it, 503 + Retry-After instead of falling over."""

from __future__ import annotations


class StreamLimiter:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0

    def try_acquire(self) -> bool:
        if self.active >= self.limit:
            return False
        self.active += 1
        return True

    def release(self) -> None:
        self.active -= 1
