"""The policy of a comparison, sans-IO: which names metadata decides, and how the rest are read.

`list_names` pairs two models' tensors by name and decides what the metadata can (`retyped`,
`same` by CRC-32 + size + view, `added`, `removed`, an unreadable pair's `changed`), leaving the
rest `Undecided`; `settle_moves` turns added names that hold a removed one's bytes into `moved`;
`schedule` turns the undecided pairs into jobs: small tensors in `Batch`es (each side's bytes in
one `read_many`), large ones `Single` (first on a sample when `sample`, else one streamed pass).
Nothing here reads: `runner.py` executes the plan.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..loading.selection import starting_with
from ..pt2.tensorinfo import TensorInfo
from .model import Proof, TensorDiff

if TYPE_CHECKING:
    from ..archives.archive_like import ArchiveLike
    from ..bodies.tensor import Order

SAMPLE_ABOVE = 16 << 20  # bytes: larger tensors are first compared on a sample (if it is smaller)
SAMPLE_BLOCKS = 64  # the sample: this many evenly spaced blocks ...
SAMPLE_BLOCK_BYTES = 64 << 10  # ... of this many bytes (4 MiB a side)
SMALL_TENSOR = 256 << 10  # tensors up to this size are read whole, in batches ...
BATCH_BYTES = 1 << 20  # ... that lie within this many bytes on each side (read_many: one request)


@dataclass(frozen=True, slots=True)
class Undecided:
    """A name on both sides, same dtype and shape, both readable, whose payloads' CRC-32s do not
    prove it the same: reading decides, both sides in `order`."""

    a: TensorInfo
    b: TensorInfo
    order: Order

    @property
    def name(self) -> str:
        return self.b.name

    @property
    def nbytes(self) -> int:
        return self.a.nbytes


Row = TensorDiff | Undecided


@dataclass(frozen=True, slots=True)
class Listing:
    """One model pair's names: `rows` in B's order (added names as `added`), and the names only
    in A (`removed` unless an added name turns out to hold their bytes)."""

    rows: tuple[Row, ...]
    removed: tuple[TensorInfo, ...]

    @property
    def added(self) -> tuple[TensorInfo, ...]:
        return tuple(r.b for r in self.rows if isinstance(r, TensorDiff) and r.status == "added" and r.b)


@dataclass(frozen=True, slots=True)
class Move:
    """An added name holds the bytes of the removed tensor `source`, as `proof` shows."""

    source: TensorInfo
    proof: Proof


@dataclass(frozen=True, slots=True)
class Placement:
    """Where an undecided pair's payloads lie: per side, the file (any hashable: a sharded
    checkpoint's shards are different files) and the offset of the entry's local header."""

    file_a: Hashable
    at_a: int
    file_b: Hashable
    at_b: int


@dataclass(frozen=True, slots=True)
class Batch:
    """Small undecided tensors of one model pair and order, lying close on each side: each side's
    bytes in one `read_many`. `members` are (slot, pair): the slot is the pair's row."""

    order: Order
    members: tuple[tuple[int, Undecided], ...]


@dataclass(frozen=True, slots=True)
class Single:
    """One large undecided tensor: compared on a sample first when `sample`, else (or when the
    sample agrees) in one streamed pass that takes both digests and the figures."""

    slot: int
    pair: Undecided
    sample: bool


Job = Batch | Single


def model_pairs(
    a: ArchiveLike, b: ArchiveLike, model_a: str | None, model_b: str | None
) -> list[tuple[str, str]]:
    """The models compared: every model against its twin when both archives hold the same several
    and none is named, else one pair (`model_b` defaults to `model_a` when `b` has it)."""
    if model_a is None and model_b is None and len(a.models) > 1 and a.models == b.models:
        return [(m, m) for m in a.models]
    resolved_a = a.resolve_model(model_a)
    if model_b is None and model_a is not None and model_a in b.models:
        model_b = model_a
    return [(resolved_a, b.resolve_model(model_b))]


def list_names(
    tensors_a: Iterable[TensorInfo], tensors_b: Iterable[TensorInfo], prefix: str | None
) -> Listing:
    """Pair the names (those starting with `prefix`) and decide what the metadata can."""
    in_a = {t.name: t for t in starting_with(tensors_a, prefix)}
    rows: list[Row] = []
    for info_b in starting_with(tensors_b, prefix):
        info_a = in_a.pop(info_b.name, None)
        rows.append(
            TensorDiff(info_b.name, "added", None, info_b) if info_a is None else decide(info_a, info_b)
        )
    return Listing(tuple(rows), tuple(in_a.values()))


def decide(a: TensorInfo, b: TensorInfo) -> Row:
    """`retyped`, `same` by CRC-32, an unreadable pair's verdict, or `Undecided` (read to decide)."""
    if a.dtype != b.dtype or a.sizes != b.sizes:
        return TensorDiff(b.name, "retyped", a, b)
    if crc_same(a, b):
        return TensorDiff(b.name, "same", a, b, proof="crc32")
    if not (a.readable and b.readable):
        note = a.unsupported or b.unsupported
        return TensorDiff(
            b.name, "changed", a, b, proof="crc32", note=f"payload differs; values unreadable: {note}"
        )
    return Undecided(a, b, order_of(a, b))


def crc_same(a: TensorInfo, b: TensorInfo) -> bool:
    """Same payload bytes (CRC-32 and size of the whole stored payload) viewed the same way."""
    sa, sb = a.storage, b.storage
    return (
        sa.crc32 == sb.crc32
        and sa.nbytes == sb.nbytes
        and sa.offset == sb.offset
        and a.dtype == b.dtype
        and a.sizes == b.sizes
        and a.strides == b.strides
        and a.storage_offset == b.storage_offset
        and a.pickled == b.pickled
    )


def order_of(a: TensorInfo, b: TensorInfo) -> Order:
    """The order both sides are read in: memory order when their views match (a digest the
    service may already hold), else row-major, so elements pair up."""
    return "default" if a.dense and b.dense and a.strides == b.strides else "contiguous"


def move_candidates(removed: Iterable[TensorInfo]) -> dict[tuple[Any, Any], list[TensorInfo]]:
    """Removed readable tensors by (dtype, shape): only those can hold an added tensor's bytes."""
    by_shape: dict[tuple[Any, Any], list[TensorInfo]] = defaultdict(list)
    for info in removed:
        if info.readable:
            by_shape[(info.dtype, info.sizes)].append(info)
    return by_shape


def settle_moves(listing: Listing, moves: Mapping[str, Move]) -> tuple[Row, ...]:
    """The listing's rows with each added name that holds a removed tensor's bytes `moved`, then
    the names only in A that no added name took, `removed` (in A's order)."""
    rows: list[Row] = []
    taken = set()
    for row in listing.rows:
        move = moves.get(row.name) if isinstance(row, TensorDiff) and row.status == "added" else None
        if move is not None:
            assert isinstance(row, TensorDiff)
            row = TensorDiff(
                row.name, "moved", move.source, row.b, proof=move.proof, moved_from=move.source.name
            )
            taken.add(move.source.name)
        rows.append(row)
    rows.extend(
        TensorDiff(info.name, "removed", info, None) for info in listing.removed if info.name not in taken
    )
    return tuple(rows)


def schedule(
    undecided: Sequence[tuple[int, Undecided]],
    placements: Mapping[int, Placement],
    *,
    exact: bool,
    sample_above: int,
) -> list[Job]:
    """The jobs that decide the undecided pairs: the batches of small tensors first, then each
    large tensor on its own (sampled first unless `exact`, when larger than both `sample_above`
    and the sample itself)."""
    sample_from = max(sample_above, SAMPLE_BLOCKS * SAMPLE_BLOCK_BYTES)
    small = [(slot, pair) for slot, pair in undecided if pair.nbytes <= SMALL_TENSOR]
    jobs: list[Job] = [Batch(order, tuple(members)) for order, members in _batches(small, placements)]
    jobs.extend(
        Single(slot, pair, sample=not exact and pair.nbytes > sample_from)
        for slot, pair in undecided
        if pair.nbytes > SMALL_TENSOR
    )
    return jobs


def _batches(
    small: Sequence[tuple[int, Undecided]], placements: Mapping[int, Placement]
) -> Iterable[tuple[Order, list[tuple[int, Undecided]]]]:
    """Small pairs grouped by (models, order, files), each group spanning at most BATCH_BYTES of
    either archive (read_many reads what lies between neighbours too, so the span, not the
    tensors' sizes, is what a group holds in memory)."""
    groups: dict[tuple[Hashable, ...], tuple[list[tuple[int, Undecided]], int, int]] = {}
    for slot, pair in small:
        where = placements[slot]
        key = (pair.a.model, pair.b.model, pair.order, where.file_a, where.file_b)
        group = groups.get(key)
        if group is not None and (
            abs(where.at_a - group[1]) > BATCH_BYTES or abs(where.at_b - group[2]) > BATCH_BYTES
        ):
            yield pair.order, group[0]
            group = None
        if group is None:
            group = groups[key] = ([], where.at_a, where.at_b)
        group[0].append((slot, pair))
    for members, _, _ in groups.values():
        yield members[0][1].order, members


def sample_starts(length: int, itemsize: int) -> tuple[list[int], int]:
    """The sample of a tensor of `length` bytes: the offsets of SAMPLE_BLOCKS evenly spaced blocks
    (whole elements, the first at 0, the last ending at the end), and the block's size."""
    block = max(itemsize, SAMPLE_BLOCK_BYTES // itemsize * itemsize)
    last = (length - block) // itemsize
    starts = sorted({round(i * last / (SAMPLE_BLOCKS - 1)) * itemsize for i in range(SAMPLE_BLOCKS)})
    return starts, block
