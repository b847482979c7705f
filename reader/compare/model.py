"""What a comparison returns: frozen records, built once and never changed.

`TensorDiff` is one name's verdict, `Comparison` every name's plus what was read; both render as the
JSON the service and `pt2serve diff --json` emit (`to_dict`). Modules are ranked here from their
tensors' figures (`reader.compare.numerics` pools them).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ..pt2.tensorinfo import TensorInfo
from .numerics import Figures, finite, pooled_absolute_l2, pooled_relative_l2

Status = Literal["same", "changed", "retyped", "moved", "added", "removed"]
STATUSES: tuple[Status, ...] = get_args(Status)
Proof = Literal["crc32", "sha256"]


@dataclass(frozen=True, slots=True)
class TensorDiff:
    """One name's verdict. `a`/`b` are the layouts on each side (None where absent); `proof` says
    how `same` or `moved` was established ("crc32" or "sha256"); `moved_from` names a moved
    tensor's old name."""

    name: str
    status: Status
    a: TensorInfo | None
    b: TensorInfo | None
    proof: Proof | None = None
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
        if info is None or info.nbytes is None:  # a custom object, symbolic sizes: no byte count
            return 0
        return info.nbytes

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


@dataclass(frozen=True, slots=True)
class Comparison:
    """What `compare` returns: every name's `TensorDiff` (B's order, then names only in A), and the
    data bytes read from each side (`{"a": n, "b": m}`)."""

    tensors: tuple[TensorDiff, ...] = ()
    bytes_read: Mapping[str, int] = field(default_factory=dict)

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
            relative, absolute = pooled_relative_l2(figures), pooled_absolute_l2(figures)
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


def module_of(name: str) -> str:
    """A tensor's module: its name up to the last dot ("" for a top-level name)."""
    return name.rpartition(".")[0]


def _sizes(info: TensorInfo) -> list[int] | None:
    return None if info.sizes is None else list(info.sizes)


def _side(info: TensorInfo) -> dict[str, Any]:
    return {"dtype": info.dtype, "sizes": _sizes(info), "nbytes": info.nbytes, "crc32": info.storage.crc32}


__all__ = ["STATUSES", "Comparison", "Figures", "Proof", "Status", "TensorDiff", "finite", "module_of"]
