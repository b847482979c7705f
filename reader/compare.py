"""Compare two open archives: per name `same`, `changed` (with figures), `added`, `removed`,
`retyped` or `moved`, reading only what the metadata cannot decide.

The order of proof, cheapest first:

1. names only in one archive are `added` or `removed`, unless an added name holds the bytes of a
   removed one (same dtype and shape; proven by CRC-32 + size + view, else by SHA-256): `moved`;
2. a different dtype or shape is `retyped` (nothing read);
3. the same payload CRC-32 and size and the same view of it (strides, offset) is `same` with
   `proof: "crc32"`, nothing read (the one rule the whole service uses for "unchanged");
4. otherwise both tensors' SHA-256 decide (`proof: "sha256"`), from the digest cache when known,
   else computed in the same streamed pass that takes the figures, so a changed tensor is read
   once per side. A tensor above `sample_above` bytes is first compared on evenly spaced blocks:
   if they differ, it is `changed` and its figures are over those blocks (`sampled: true`), with
   no full read; if they agree, the full pass decides. `exact=True` always takes the full pass.

Figures of a `changed` tensor (equal dtype and shape) are over its values as float64 (complex as
complex128; bf16 and fp8 decoded by `reader.pt2.dtypes.to_numpy`, as every reader of values
does): `max_abs_diff`, `relative_l2` = ||a - b|| / ||a||, `cosine` = <a, b> / (||a|| ||b||),
`fraction_differ` (elements whose values differ; NaN against NaN counts as equal). Pairs where
either value is NaN or infinite are left out of the norms and counted in `nonfinite`. Memory is
bounded by a few chunks per tensor in flight, whatever the archive's size.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .digests import THREAD_HASH_MIN, Digests, tensor_key
from .pt2.dtypes import BY_NAME, to_numpy
from .pt2.tensorinfo import TensorInfo

if TYPE_CHECKING:
    from .archive import Archive

STATUSES = ("same", "changed", "retyped", "moved", "added", "removed")
SAMPLE_ABOVE = 16 << 20  # bytes: larger tensors are first compared on a sample (if it is smaller)
SAMPLE_BLOCKS = 64  # the sample: this many evenly spaced blocks ...
SAMPLE_BLOCK_BYTES = 64 << 10  # ... of this many bytes (4 MiB a side)
CHUNK_BYTES = 1 << 20  # the streamed pass's chunk
FOLD_ELEMENTS = 1 << 16  # figures are folded in blocks of this many elements (float64 temporaries)
STREAMED_AT_ONCE = 2  # large tensors streamed at once (each holds a few chunks)
CONCURRENT_TENSORS = 4  # tensors (or batches) compared at once: remote reads overlap, memory is bounded
SMALL_TENSOR = 256 << 10  # tensors up to this size are read whole, in batches ...
BATCH_BYTES = 1 << 20  # ... that lie within this many bytes on each side (read_many: one request)
Progress = Callable[[int, int], None]  # (bytes read so far, bytes the comparison expects to read)


@dataclass
class Figures:
    """How far apart two tensors' values are. The sums of squares are kept relative to `scale`
    (the largest magnitude seen), as BLAS's nrm2 does, so values near the float64 limit do not
    overflow them; modules aggregate tensors from these sums."""

    elements: int = 0
    elements_differ: int = 0
    nonfinite: int = 0
    max_abs_diff: float = 0.0
    scale: float = 0.0
    sum_sq_diff: float = 0.0  # sum |a - b|^2 / scale^2
    sum_sq_a: float = 0.0  # sum |a|^2 / scale^2
    sum_sq_b: float = 0.0
    dot: float = 0.0  # Re <a, b> / scale^2
    sampled: bool = False

    def add(self, a: np.ndarray, b: np.ndarray) -> None:
        """Fold in one aligned piece of both tensors (flat arrays of the tensors' own dtype), a
        block at a time, so the float64 temporaries stay small whatever the piece's size."""
        for start in range(0, a.size, FOLD_ELEMENTS):
            self._add(a[start : start + FOLD_ELEMENTS], b[start : start + FOLD_ELEMENTS])

    def _add(self, a: np.ndarray, b: np.ndarray) -> None:
        """The usual block (every value finite, no square overflowing): four dot products and a
        subtraction; anything else takes the careful path, which masks and rescales."""
        wide = np.complex128 if a.dtype.kind == "c" else np.float64
        x, y = a.astype(wide), b.astype(wide)
        inner = _inner_complex if wide is np.complex128 else _inner_real
        with np.errstate(over="ignore", invalid="ignore"):
            d = x - y
            sums = (inner(d, d), inner(x, x), inner(y, y), inner(x, y))
        if not all(map(math.isfinite, sums)) or (sums[1] == 0 and x.any()) or (sums[2] == 0 and y.any()):
            self._add_carefully(a, b)
            return
        self.elements += int(a.size)
        # compared in their own type (exact for 64-bit integers); bf16/fp8 (kind "V") as float64
        self.elements_differ += int(np.count_nonzero(x != y if a.dtype.kind == "V" else a != b))
        if not x.size:
            return
        self.max_abs_diff = max(self.max_abs_diff, float(np.abs(d).max()))
        if self.scale == 0:
            self.scale = 1.0
        unit = self.scale**2
        self.sum_sq_diff += float(sums[0]) / unit
        self.sum_sq_a += float(sums[1]) / unit
        self.sum_sq_b += float(sums[2]) / unit
        self.dot += float(sums[3]) / unit

    def _add_carefully(self, a: np.ndarray, b: np.ndarray) -> None:
        """NaN and infinities left out (counted), squares taken relative to the largest magnitude."""
        wide = np.complex128 if a.dtype.kind == "c" else np.float64
        x, y = a.astype(wide), b.astype(wide)
        finite = np.isfinite(x) & np.isfinite(y)
        all_finite = bool(finite.all())
        differ = a != b  # in the tensor's own type: exact for 64-bit integers
        if not all_finite and a.dtype.kind not in "iub":  # floats, bf16/fp8 (kind "V"): NaN equals NaN
            differ &= ~(np.isnan(x) & np.isnan(y))
        self.elements += int(a.size)
        self.elements_differ += int(np.count_nonzero(differ))
        if not all_finite:
            self.nonfinite += int(finite.size - np.count_nonzero(finite))
            x, y = x[finite], y[finite]
        if not x.size:
            return
        with np.errstate(over="ignore"):  # a difference of two values near the limit is inf
            d = x - y
        self.max_abs_diff = max(self.max_abs_diff, float(np.abs(d).max()))
        top = max(float(np.abs(x).max()), float(np.abs(y).max()))
        if top > self.scale:
            shrink = (self.scale / top) ** 2
            self.sum_sq_diff *= shrink
            self.sum_sq_a *= shrink
            self.sum_sq_b *= shrink
            self.dot *= shrink
            self.scale = top
        if self.scale == 0:
            return
        if self.scale != 1.0 and not 1e-100 < self.scale < 1e100:  # rescale only where squares could overflow
            x, y = x / self.scale, y / self.scale
            d = x - y
            unit = 1.0
        else:
            unit = self.scale**2
        self.sum_sq_diff += float(np.vdot(d, d).real) / unit
        self.sum_sq_a += float(np.vdot(x, x).real) / unit
        self.sum_sq_b += float(np.vdot(y, y).real) / unit
        self.dot += float(np.vdot(y, x).real) / unit

    @property
    def relative_l2(self) -> float | None:
        """||a - b|| / ||a||; None when a is all zeros and b is not (infinitely far)."""
        if self.sum_sq_a == 0:
            return 0.0 if self.sum_sq_diff == 0 else None
        return _finite(math.sqrt(self.sum_sq_diff) / math.sqrt(self.sum_sq_a))

    @property
    def cosine(self) -> float | None:
        """<a, b> / (||a|| ||b||); None when either is all zeros."""
        if self.sum_sq_a == 0 or self.sum_sq_b == 0:
            return None
        return _finite(self.dot / (math.sqrt(self.sum_sq_a) * math.sqrt(self.sum_sq_b)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_abs_diff": _finite(self.max_abs_diff),
            "relative_l2": self.relative_l2,
            "cosine": self.cosine,
            "fraction_differ": self.elements_differ / self.elements if self.elements else 0.0,
            "elements_differ": self.elements_differ,
            "elements": self.elements,
            "nonfinite": self.nonfinite,
            "sampled": self.sampled,
        }


def _inner_real(x: np.ndarray, y: np.ndarray) -> float:
    """<x, y> of float64 arrays, in NumPy's own loop: np.vdot is slow for reals, and np.dot's
    threaded BLAS thrashes on a busy host for blocks this small (measured: 20x)."""
    return float(np.einsum("i,i->", x, y))


def _inner_complex(x: np.ndarray, y: np.ndarray) -> float:
    """Re <y, x> for complex arrays (|x|^2 when x is y)."""
    return float(np.vdot(y, x).real)


def _pooled_absolute_l2(figures: list[Figures]) -> float | None:
    """sqrt(sum ||a_i - b_i||^2) over several tensors (None without figures), on a common scale."""
    if not figures:
        return None
    top = max(f.scale for f in figures)
    if top == 0:
        return 0.0
    return _finite(top * math.sqrt(sum(f.sum_sq_diff * (f.scale / top) ** 2 for f in figures)))


def _pooled_relative_l2(figures: list[Figures]) -> float | None:
    """sqrt(sum ||a_i - b_i||^2 / sum ||a_i||^2) over several tensors, on a common scale."""
    top = max((f.scale for f in figures), default=0.0)
    if top == 0:
        return None
    diff = sum(f.sum_sq_diff * (f.scale / top) ** 2 for f in figures)
    base = sum(f.sum_sq_a * (f.scale / top) ** 2 for f in figures)
    return _finite(math.sqrt(diff / base)) if base else None


@dataclass
class TensorDiff:
    """One name's verdict. `a`/`b` are the layouts on each side (None where absent); `proof` says
    how `same` or `moved` was established ("crc32" or "sha256"); `moved_from` names a moved
    tensor's old name."""

    name: str
    status: str
    a: TensorInfo | None
    b: TensorInfo | None
    proof: str | None = None
    figures: Figures | None = None
    moved_from: str | None = None
    note: str | None = None

    @property
    def module(self) -> str:
        return module_of(self.name)

    @property
    def bytes_differ(self) -> int:
        """The bytes this name adds to what differs: the new side's (the old one's if removed)."""
        if self.status in ("same", "moved"):
            return 0
        info = self.b if self.b is not None else self.a
        return (info.nbytes or 0) if info is not None else 0

    def to_dict(self) -> dict[str, Any]:
        info = self.b if self.b is not None else self.a
        assert info is not None
        out: dict[str, Any] = {"name": self.name, "model": info.model, "status": self.status}
        if self.proof is not None:
            out["proof"] = self.proof
        if self.moved_from is not None:
            out["from"] = self.moved_from
        if self.status == "same":
            out.update(dtype=info.dtype, sizes=_sizes(info), nbytes=info.nbytes)
        else:
            out["a"] = None if self.a is None else _side(self.a)
            out["b"] = None if self.b is None else _side(self.b)
        if self.figures is not None:
            out["figures"] = self.figures.to_dict()
        if self.note is not None:
            out["note"] = self.note
        return out


@dataclass
class Comparison:
    """What `compare` returns: every name's `TensorDiff` (B's order, then names only in A)."""

    tensors: list[TensorDiff] = field(default_factory=list)
    bytes_read: dict[str, int] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return all(t.status == "same" for t in self.tensors)

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(STATUSES, 0)
        for t in self.tensors:
            counts[t.status] += 1
        return counts

    def modules(self) -> list[dict[str, Any]]:
        """Modules (names up to their last dot) with any difference, most changed first: ranked by
        the relative L2 of their changed tensors pooled (sqrt(sum ||a-b||^2 / sum ||a||^2)); a
        module with an added, removed or retyped tensor ("structural") ranks above any figure.
        `absolute_l2` is the same pooled change not divided (sqrt(sum ||a-b||^2)): where every old
        value was zero the relative change has no value (None) however much changed, so such a
        module ("from_zero") ranks next after the structural ones, by its absolute change."""
        groups: dict[str, list[TensorDiff]] = defaultdict(list)
        for t in self.tensors:
            groups[t.module].append(t)
        ranked = []
        for module, members in groups.items():
            changed = [t for t in members if t.status == "changed"]
            structural = sum(1 for t in members if t.status in ("retyped", "added", "removed"))
            if not (changed or structural):
                continue
            figures = [t.figures for t in changed if t.figures is not None]
            relatives = [r for r in (f.relative_l2 for f in figures) if r is not None]
            relative, absolute = _pooled_relative_l2(figures), _pooled_absolute_l2(figures)
            ranked.append({
                "module": module, "tensors": len(members), "changed": len(changed), "structural": structural,
                "bytes_differ": sum(t.bytes_differ for t in members),
                "relative_l2": relative, "max_relative_l2": max(relatives, default=None),
                "absolute_l2": absolute, "from_zero": relative is None and bool(absolute),
            })  # fmt: skip
        ranked.sort(
            key=lambda m: (
                m["structural"] == 0,
                not m["from_zero"],
                -(m["relative_l2"] or 0.0),
                -(m["absolute_l2"] or 0.0),
                m["module"],
            )
        )
        return ranked

    def summary(self) -> dict[str, Any]:
        return {
            "tensors": len(self.tensors),
            "counts": self.counts(),
            "identical": self.identical,
            "bytes_differ": sum(t.bytes_differ for t in self.tensors),
            "sampled": sum(1 for t in self.tensors if t.figures is not None and t.figures.sampled),
            "bytes_read": dict(self.bytes_read),
            "modules": self.modules(),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary(), "tensors": [t.to_dict() for t in self.tensors]}


async def compare(
    a: Archive,
    b: Archive,
    model_a: str | None = None,
    model_b: str | None = None,
    prefix: str | None = None,
    exact: bool = False,
    sample_above: int = SAMPLE_ABOVE,
    *,
    digests_a: Digests | None = None,
    digests_b: Digests | None = None,
    progress: Progress | None = None,
) -> Comparison:
    """Compare archive `a` (old) with `b` (new), by name, reading only what metadata cannot decide.

    `model_a`/`model_b`: the models compared (default: each archive's only or "model" model; when
    both archives hold the same several models and none is named, every model against its twin;
    `model_b` defaults to `model_a` when `b` has it). `prefix` keeps names starting with it.
    `digests_a`/`digests_b`: the archives' digest caches (the service's), read and filled.
    `progress(done, total)` is called with bytes read as the comparison goes.
    """
    digests_a = digests_a or Digests(a)
    digests_b = digests_b or Digests(b)
    before = _data_bytes(a), _data_bytes(b)
    result = Comparison()
    pending: list[tuple[TensorDiff, str]] = []  # undecided: (diff, order)
    for model_a_name, model_b_name in _model_pairs(a, b, model_a, model_b):
        in_a = {t.name: t for t in a.tensors(model_a_name) if prefix is None or t.name.startswith(prefix)}
        only_b: list[TensorDiff] = []
        for info_b in b.tensors(model_b_name):
            if prefix is not None and not info_b.name.startswith(prefix):
                continue
            info_a = in_a.pop(info_b.name, None)
            diff = (
                TensorDiff(info_b.name, "added", None, info_b)
                if info_a is None
                else _decide_cheaply(info_a, info_b)
            )
            result.tensors.append(diff)
            if info_a is None:
                only_b.append(diff)
            elif diff.status == "?":
                pending.append((diff, _order(info_a, info_b)))
        moved = await _find_moved(list(in_a.values()), [d.b for d in only_b if d.b], digests_a, digests_b)
        for diff in only_b:
            found = moved.get(diff.name)
            if found is not None:
                diff.status, diff.a, diff.proof, diff.moved_from = "moved", found[0], found[1], found[0].name
                del in_a[found[0].name]
        result.tensors.extend(TensorDiff(name, "removed", info, None) for name, info in in_a.items())

    tracker = _Tracker(sum(d.a.nbytes or 0 for d, _ in pending if d.a) * 2, progress)
    jobs = [
        _decide_batch(a, b, batch, order, digests_a, digests_b, tracker)
        for order, batch in _small_batches(a, b, pending)
    ] + [
        _decide_by_reading(a, b, diff, order, digests_a, digests_b, exact, sample_above, tracker)
        for diff, order in pending
        if (diff.a.nbytes or 0) > SMALL_TENSOR  # type: ignore[union-attr]
    ]
    await _bounded(iter(jobs), CONCURRENT_TENSORS)
    result.bytes_read = {"a": _data_bytes(a) - before[0], "b": _data_bytes(b) - before[1]}
    return result


def module_of(name: str) -> str:
    """A tensor's module: its name up to the last dot ("" for a top-level name)."""
    return name.rpartition(".")[0]


# -- deciding from metadata ------------------------------------------------------------------------


def _decide_cheaply(a: TensorInfo, b: TensorInfo) -> TensorDiff:
    """`retyped`, `same` by CRC-32, an unreadable pair's verdict, or "?" (read to decide)."""
    if a.dtype != b.dtype or a.sizes != b.sizes:
        return TensorDiff(b.name, "retyped", a, b)
    if _crc_same(a, b):
        return TensorDiff(b.name, "same", a, b, proof="crc32")
    if not (a.readable and b.readable):
        note = a.unsupported or b.unsupported
        return TensorDiff(
            b.name, "changed", a, b, proof="crc32", note=f"payload differs; values unreadable: {note}"
        )
    return TensorDiff(b.name, "?", a, b)


def _crc_same(a: TensorInfo, b: TensorInfo) -> bool:
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


def _order(a: TensorInfo, b: TensorInfo) -> str:
    """The order both sides are read in: memory order when their views match (a digest the
    service may already hold), else row-major, so elements pair up."""
    return "default" if a.dense and b.dense and a.strides == b.strides else "contiguous"


def _model_pairs(a: Archive, b: Archive, model_a: str | None, model_b: str | None) -> list[tuple[str, str]]:
    if model_a is None and model_b is None and len(a.models) > 1 and a.models == b.models:
        return [(m, m) for m in a.models]
    resolved_a = a.resolve_model(model_a)
    if model_b is None and model_a is not None and model_a in b.models:
        model_b = model_a
    return [(resolved_a, b.resolve_model(model_b))]


# -- moved tensors ---------------------------------------------------------------------------------


async def _find_moved(
    removed: list[TensorInfo], added: list[TensorInfo], digests_a: Digests, digests_b: Digests
) -> dict[str, tuple[TensorInfo, str]]:
    """Added name -> (the removed tensor whose bytes it holds, proof). Only tensors of the same
    dtype and shape are candidates; digests are read for those alone."""
    by_shape: dict[tuple[Any, Any], list[TensorInfo]] = defaultdict(list)
    for info in removed:
        if info.readable:
            by_shape[(info.dtype, info.sizes)].append(info)
    found: dict[str, tuple[TensorInfo, str]] = {}
    used: set[str] = set()
    for info_b in added:
        candidates = [c for c in by_shape.get((info_b.dtype, info_b.sizes), ()) if c.name not in used]
        if not candidates or not info_b.readable:
            continue
        match = next((c for c in candidates if _crc_same(c, info_b)), None)
        proof = "crc32"
        if match is None:
            proof = "sha256"
            want = await digests_b.tensor(info_b, "contiguous")
            for candidate in candidates:
                if await digests_a.tensor(candidate, "contiguous") == want:
                    match = candidate
                    break
        if match is not None:
            used.add(match.name)
            found[info_b.name] = (match, proof)
    return found


# -- deciding by reading ---------------------------------------------------------------------------


def _small_batches(
    a: Archive, b: Archive, pending: list[tuple[TensorDiff, str]]
) -> Iterable[tuple[str, list[TensorDiff]]]:
    """Small undecided tensors grouped by (models, order), each group spanning at most BATCH_BYTES
    of either archive (read_many reads what lies between neighbours too, so the span, not the
    tensors' sizes, is what a group holds in memory)."""
    groups: dict[tuple[str, str, str], tuple[list[TensorDiff], int, int]] = {}
    for diff, order in pending:
        assert diff.a is not None and diff.b is not None
        if (diff.a.nbytes or 0) > SMALL_TENSOR:
            continue
        key = (diff.a.model, diff.b.model, order)
        at_a = a.tensor(diff.a.name, diff.a.model).entry.header_offset
        at_b = b.tensor(diff.b.name, diff.b.model).entry.header_offset
        group = groups.get(key)
        if group is not None and (abs(at_a - group[1]) > BATCH_BYTES or abs(at_b - group[2]) > BATCH_BYTES):
            yield order, group[0]
            group = None
        if group is None:
            group = groups[key] = ([], at_a, at_b)
        group[0].append(diff)
    for (_, _, order), group in groups.items():
        yield order, group[0]


async def _decide_batch(
    a: Archive,
    b: Archive,
    batch: list[TensorDiff],
    order: str,
    digests_a: Digests,
    digests_b: Digests,
    tracker: _Tracker,
) -> None:
    """Small tensors: each side's bytes in one `read_many` (neighbouring payloads in one request),
    then digests and figures tensor by tensor. Known equal digests skip the read."""
    unread = []
    for diff in batch:
        assert diff.a is not None and diff.b is not None
        known_a = digests_a.cached(tensor_key(diff.a, order))
        if known_a is not None and known_a == digests_b.cached(tensor_key(diff.b, order)):
            diff.status, diff.proof = "same", "sha256"
        else:
            unread.append(diff)
    if not unread:
        return
    model_a, model_b = unread[0].a.model, unread[0].b.model  # type: ignore[union-attr]
    datas_a, datas_b = await asyncio.gather(
        a.read_many([d.a.name for d in unread if d.a is not None], model_a, order),
        b.read_many([d.name for d in unread], model_b, order),
    )
    for diff in unread:
        info_a, info_b = diff.a, diff.b
        assert info_a is not None and info_b is not None
        data_a, data_b = datas_a[info_a.name], datas_b[info_b.name]
        tracker.advance(len(data_a) + len(data_b))
        digest_a, digest_b = hashlib.sha256(data_a).digest(), hashlib.sha256(data_b).digest()
        digests_a.remember(tensor_key(info_a, order), digest_a)
        digests_b.remember(tensor_key(info_b, order), digest_b)
        if digest_a == digest_b:
            diff.status, diff.proof = "same", "sha256"
            continue
        dtype = BY_NAME[info_a.dtype]  # type: ignore[index]
        figures = Figures()
        figures.add(_flat(data_a, dtype), _flat(data_b, dtype))
        diff.status, diff.figures = "changed", figures


async def _decide_by_reading(
    a: Archive,
    b: Archive,
    diff: TensorDiff,
    order: str,
    digests_a: Digests,
    digests_b: Digests,
    exact: bool,
    sample_above: int,
    tracker: _Tracker,
) -> None:
    info_a, info_b = diff.a, diff.b
    assert info_a is not None and info_b is not None
    known_a = digests_a.cached(tensor_key(info_a, order))
    known_b = digests_b.cached(tensor_key(info_b, order))
    if known_a is not None and known_b is not None and known_a == known_b:
        diff.status, diff.proof = "same", "sha256"
        return
    tensor_a, tensor_b = (
        a.tensor(info_a.name, info_a.model, order),
        b.tensor(info_b.name, info_b.model, order),
    )
    dtype = BY_NAME[info_a.dtype]  # type: ignore[index]
    if not exact and (info_a.nbytes or 0) > max(sample_above, SAMPLE_BLOCKS * SAMPLE_BLOCK_BYTES):
        figures = await _sampled_figures(tensor_a, tensor_b, dtype, tracker)
        if figures.elements_differ:
            diff.status, diff.figures = "changed", figures
            return
    if known_a is not None and known_b is not None:  # known to differ: the figures alone
        async with tracker.streams:
            figures, _, _ = await _streamed(tensor_a, tensor_b, dtype, tracker, hashing=False)
        diff.status, diff.figures = "changed", figures
        return
    async with tracker.streams:
        figures, digest_a, digest_b = await _streamed(tensor_a, tensor_b, dtype, tracker, hashing=True)
    digests_a.remember(tensor_key(info_a, order), digest_a)
    digests_b.remember(tensor_key(info_b, order), digest_b)
    if digest_a == digest_b:
        diff.status, diff.proof = "same", "sha256"
    else:
        diff.status, diff.figures = "changed", figures


async def _streamed(tensor_a: Any, tensor_b: Any, dtype: Any, tracker: _Tracker, *, hashing: bool):
    """One pass over both tensors in aligned chunks: figures, and both SHA-256s when `hashing`.
    The next chunks are read while the current ones are folded in (on a worker thread)."""
    figures = Figures()
    hashes = (hashlib.sha256(), hashlib.sha256())
    itemsize = dtype.itemsize

    def hash_both(piece_a: memoryview, piece_b: memoryview) -> None:
        hashes[0].update(piece_a)
        hashes[1].update(piece_b)

    def figure(piece_a: memoryview, piece_b: memoryview) -> None:
        figures.add(_flat(piece_a, dtype), _flat(piece_b, dtype))

    queue: asyncio.Queue[tuple[memoryview, memoryview] | None] = asyncio.Queue(maxsize=1)

    async def produce() -> None:
        async for pair in _aligned(
            tensor_a.chunks(0, None, CHUNK_BYTES), tensor_b.chunks(0, None, CHUNK_BYTES), itemsize
        ):
            tracker.advance(2 * len(pair[0]))
            await queue.put(pair)
        await queue.put(None)

    producer = asyncio.ensure_future(produce())
    try:
        while (pair := await queue.get()) is not None:
            if len(pair[0]) >= THREAD_HASH_MIN:  # hashing and figures on two threads (both release the GIL)
                await asyncio.gather(
                    *([asyncio.to_thread(hash_both, *pair)] if hashing else []),
                    asyncio.to_thread(figure, *pair),
                )
            else:
                if hashing:
                    hash_both(*pair)
                figure(*pair)
        await producer
    finally:
        if not producer.done():
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)
    return figures, hashes[0].digest(), hashes[1].digest()


async def _sampled_figures(tensor_a: Any, tensor_b: Any, dtype: Any, tracker: _Tracker) -> Figures:
    """Figures over SAMPLE_BLOCKS evenly spaced blocks at the same offsets of both tensors."""
    itemsize, length = dtype.itemsize, tensor_a.length
    block = max(itemsize, SAMPLE_BLOCK_BYTES // itemsize * itemsize)
    last = (length - block) // itemsize
    starts = sorted({round(i * last / (SAMPLE_BLOCKS - 1)) * itemsize for i in range(SAMPLE_BLOCKS)})
    limit = asyncio.Semaphore(8)

    async def both(start: int) -> tuple[bytes, bytes]:
        async with limit:
            pair = await asyncio.gather(
                tensor_a.read_range(start, start + block), tensor_b.read_range(start, start + block)
            )
            tracker.advance(2 * block)
            return pair[0], pair[1]

    pairs = await asyncio.gather(*(both(s) for s in starts))
    figures = Figures(sampled=True)
    figures.add(_flat(b"".join(p[0] for p in pairs), dtype), _flat(b"".join(p[1] for p in pairs), dtype))
    return figures


async def _aligned(
    chunks_a: AsyncIterator[bytes | memoryview], chunks_b: AsyncIterator[bytes | memoryview], unit: int
) -> AsyncIterator[tuple[memoryview, memoryview]]:
    """Equal-length pieces (whole elements) of two streams of the same length, however each is
    chunked: views of the chunks themselves, cut where either stream's chunk ends; only an
    element split across two chunks is copied (into a piece of its own)."""
    async with aclosing(chunks_a) as stream_a, aclosing(chunks_b) as stream_b:  # type: ignore[type-var]
        streams = (stream_a.__aiter__(), stream_b.__aiter__())
        queues: tuple[list[memoryview], list[memoryview]] = ([], [])
        ended = [False, False]
        while True:
            wanted = [i for i in (0, 1) if not ended[i] and _short(queues[i], unit)]
            got = await asyncio.gather(*(_next(streams[i]) for i in wanted))
            for i, chunk in zip(wanted, got):
                if chunk is None:
                    ended[i] = True
                elif len(chunk):
                    queues[i].append(memoryview(chunk).cast("B"))
                    _whole_front(queues[i], unit)
            if not (_short(queues[0], unit) or _short(queues[1], unit)):
                front_a, front_b = queues[0][0], queues[1][0]
                ready = min(len(front_a), len(front_b))
                ready -= ready % unit
                yield front_a[:ready], front_b[:ready]
                for queue in queues:
                    queue[0] = queue[0][ready:]
                    if not queue[0]:
                        queue.pop(0)
                    _whole_front(queue, unit)
            elif ended[0] and ended[1]:
                if queues[0] or queues[1]:
                    raise ValueError("the two tensors' byte streams differ in length")
                return
            elif (ended[0] and _short(queues[0], unit)) or (ended[1] and _short(queues[1], unit)):
                raise ValueError("the two tensors' byte streams differ in length")


def _short(queue: list[memoryview], unit: int) -> bool:
    """No whole element at the front of the queue yet."""
    return not queue or len(queue[0]) < unit


def _whole_front(queue: list[memoryview], unit: int) -> None:
    """Make the front piece hold at least one whole element, copying the few bytes of an element
    that a chunk boundary split (the front becomes that one element)."""
    while len(queue) > 1 and len(queue[0]) < unit:
        need = unit - len(queue[0])
        queue[0] = memoryview(bytes(queue[0]) + bytes(queue[1][:need]))
        queue[1] = queue[1][need:]
        if not queue[1]:
            queue.pop(1)


async def _next(stream: AsyncIterator[bytes | memoryview]) -> bytes | memoryview | None:
    try:
        return await stream.__anext__()
    except StopAsyncIteration:
        return None


def _flat(raw: bytes, dtype: Any) -> np.ndarray:
    return to_numpy(raw, dtype, (-1,))


class _Tracker:
    """One comparison's reading: bytes read so far (reported to a progress callback), and the
    slots for large tensors streamed at once."""

    def __init__(self, total: int, progress: Progress | None) -> None:
        self.total, self.done, self.progress = total, 0, progress
        self.streams = asyncio.Semaphore(STREAMED_AT_ONCE)

    def advance(self, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.done, max(self.total, self.done))


async def _bounded(coroutines: Iterable[Any], limit: int) -> None:
    """Run coroutines at most `limit` at a time (a window, so 10,000 never exist at once)."""
    running: set[asyncio.Task[None]] = set()
    try:
        for coroutine in coroutines:
            if len(running) >= limit:
                done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()
            running.add(asyncio.ensure_future(coroutine))
        for task in asyncio.as_completed(running):
            await task
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


def _data_bytes(archive: Archive) -> int:
    return archive.stats.get("data", {}).get("bytes", 0)


def _sizes(info: TensorInfo) -> list[int] | None:
    return None if info.sizes is None else list(info.sizes)


def _side(info: TensorInfo) -> dict[str, Any]:
    return {"dtype": info.dtype, "sizes": _sizes(info), "nbytes": info.nbytes, "crc32": info.storage.crc32}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
