"""Tensor-parallel shards (sans-IO): which block of which tensor one rank loads.

`Shard(rank, world_size, dims={"*.attn.c_attn.weight": 1, "*.mlp.*": 0})`: a tensor whose name
matches a pattern (`fnmatch`, case-sensitive; the first pattern that matches, in the order given,
decides its dim) is cut along that dim into `world_size` blocks of `ceil(size / world_size)`, the
last ones shorter or empty (as TGI's `get_sharded` cuts them); rank r gets block r. A tensor no
pattern matches is loaded whole by every rank. A negative dim counts from the end, as in torch.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import ReaderError
from ..pt2.tensorinfo import TensorInfo

_WILDCARDS = frozenset("*?[")


class InvalidShard(ReaderError, ValueError):
    """A shard that cannot be cut: a rank outside the world, or a dim the tensor does not have."""


@dataclass(frozen=True, slots=True)
class Shard:
    """Rank `rank` of `world_size`; `dims` maps name patterns to the dim their tensors are cut along."""

    rank: int
    world_size: int
    dims: Mapping[str, int] = field(default_factory=dict)
    # `dims` split for dim_of: names without wildcards, and the patterns, each with its place in `dims`
    _names: dict[str, tuple[int, int]] = field(init=False, repr=False, compare=False)
    _patterns: tuple[tuple[int, str, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.world_size, int) or self.world_size < 1:
            raise InvalidShard(f"world_size must be a positive integer, not {self.world_size!r}")
        if not isinstance(self.rank, int) or not 0 <= self.rank < self.world_size:
            raise InvalidShard(f"rank must be in 0..{self.world_size - 1}, not {self.rank!r}")
        for pattern, dim in self.dims.items():
            if not isinstance(pattern, str) or not isinstance(dim, int) or isinstance(dim, bool):
                raise InvalidShard(f"dims maps name patterns to ints, not {pattern!r}: {dim!r}")
        object.__setattr__(self, "dims", dict(self.dims))
        names: dict[str, tuple[int, int]] = {}
        patterns: list[tuple[int, str, int]] = []
        for place, (pattern, dim) in enumerate(self.dims.items()):
            if _WILDCARDS.intersection(pattern):
                patterns.append((place, pattern, dim))
            else:  # matches itself only: a lookup (a model's 51 weights named one by one: 51 x 149 matches)
                names.setdefault(pattern, (place, dim))
        object.__setattr__(self, "_names", names)
        object.__setattr__(self, "_patterns", tuple(patterns))

    def dim_of(self, name: str) -> int | None:
        """The dim the first matching pattern names, or None: the tensor is whole."""
        place, dim = self._names.get(name, (len(self.dims), None))
        for before, pattern, wild in self._patterns:
            if before > place:
                break
            if fnmatch.fnmatchcase(name, pattern):
                return wild
        return dim

    def bounds(self, size: int) -> tuple[int, int]:
        """This rank's block [start, stop) of a dim of `size`."""
        block = -(-size // self.world_size)
        start = min(self.rank * block, size)
        return start, min(start + block, size)

    def cut(self, info: TensorInfo) -> Cut | None:
        """The block of `info` this rank gets, or None when the tensor is loaded whole."""
        dim = self.dim_of(info.name)
        if dim is None:
            return None
        sizes = info.geometry.sizes  # UnsupportedPayload unless readable
        ndim = len(sizes)
        if not -ndim <= dim < ndim:
            raise InvalidShard(f"{info.name!r} has {ndim} dims {sizes}; the shard cuts it along dim {dim}")
        dim %= ndim
        start, stop = self.bounds(sizes[dim])
        return Cut(dim, start, stop)


@dataclass(frozen=True, slots=True)
class Cut:
    """Elements [start, stop) of dim `dim`."""

    dim: int
    start: int
    stop: int

    def index(self) -> tuple[slice, ...]:
        """As NumPy basic indexing: `full[cut.index()]` is the block."""
        return (slice(None),) * self.dim + (slice(self.start, self.stop),)
