"""ExecuTorch programs an archive carries: the files torch's `package_pt2(..., executorch_files=...)`
stores under `<root>/data/executorch/` (a `.pte` beside the exported program and its weights).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..zipfmt import ZipEntry

EXECUTORCH_DIR = "data/executorch/"  # torch.export.pt2_archive.constants.EXECUTORCH_DIR


@dataclass(frozen=True, slots=True)
class EmbeddedFile:
    """One file under data/executorch/: `name` is its path below that folder."""

    name: str
    entry: str
    size: int
    compression: str
    crc32: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "compression": self.compression, "crc32": self.crc32}


def executorch_files(entries: Mapping[str, ZipEntry], root: str) -> dict[str, EmbeddedFile]:
    """Every file (not folder entry) below `<root>/data/executorch/`, by its name below it."""
    prefix = f"{root}/{EXECUTORCH_DIR}"
    found = {}
    for name, entry in entries.items():
        if name.startswith(prefix) and not name.endswith("/") and len(name) > len(prefix):
            found[name[len(prefix) :]] = EmbeddedFile(
                name[len(prefix) :], name, entry.size, entry.compression, entry.crc32
            )
    return dict(sorted(found.items()))
