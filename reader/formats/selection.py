"""Which tensors a bundle (safetensors, .ptd) holds: the one rule the service and the CLI share.

Explicit names are taken as given (each once) and must all be writable; otherwise one
model's tensors (the named one, else the default) whose names start with the prefix,
leaving out, and naming, those the format cannot hold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import UnsupportedPayload
from ..loading.selection import select_tensors
from ..pt2.tensorinfo import TensorInfo

if TYPE_CHECKING:
    from ..archives.archive import Archive


@dataclass(frozen=True)
class Selection:
    chosen: list[TensorInfo]
    skipped: list[TensorInfo]  # matched, but the format cannot hold them


def select(
    archive: Archive,
    writable: Callable[[TensorInfo], bool],
    fmt: str,
    *,
    model: str | None = None,
    prefix: str | None = None,
    names: Sequence[str] | None = None,
) -> Selection:
    """The tensors of `archive` a `fmt` bundle holds."""
    if names:
        chosen = select_tensors(archive, model, names=names)
        refused = [t.name for t in chosen if not writable(t)]
        if refused:
            raise UnsupportedPayload(f"cannot be written as {fmt}: {', '.join(refused)}")
        return Selection(chosen, [])
    # one model: names are unique only within a model
    matched = select_tensors(archive, model, prefix)
    return Selection([t for t in matched if writable(t)], [t for t in matched if not writable(t)])


__all__ = [
    "select",
    "select_tensors",
]
