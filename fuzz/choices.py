"""Where fuzzing decisions come from: hypothesis, atheris or a seeded random stream, behind one protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Choices(Protocol):
    def integer(self, low: int, high: int) -> int: ...
    def raw(self, size: int) -> bytes: ...


def pick(ch: Choices, items: Sequence[Any]) -> Any:
    return items[ch.integer(0, len(items) - 1)]


def chance(ch: Choices, one_in: int) -> bool:
    return ch.integer(0, one_in - 1) == 0


class RandomChoices:
    def __init__(self, rng: Any) -> None:
        self.rng = rng

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def raw(self, size: int) -> bytes:
        return self.rng.randbytes(size)


class FuzzedChoices:
    """atheris.FuzzedDataProvider as Choices."""

    def __init__(self, fdp: Any) -> None:
        self.fdp = fdp

    def integer(self, low: int, high: int) -> int:
        return self.fdp.ConsumeIntInRange(low, high)

    def raw(self, size: int) -> bytes:
        return self.fdp.ConsumeBytes(size)


class HypothesisChoices:
    """hypothesis' st.data() as Choices."""

    def __init__(self, data: Any) -> None:
        from hypothesis import strategies as st

        self.data = data
        self.st = st

    def integer(self, low: int, high: int) -> int:
        return self.data.draw(self.st.integers(low, high))

    def raw(self, size: int) -> bytes:
        return self.data.draw(self.st.binary(min_size=size, max_size=size))
