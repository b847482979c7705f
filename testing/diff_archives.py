"""Two small archives that differ (a changed element, a name only in each) for the `pt2serve diff` tests;
FLOAT32 is torch's ScalarType code for float32."""

from __future__ import annotations

import numpy as np

from testing.zipbytes import write_pt2

FLOAT32 = 7


def pair(tmp_path, elements: int = 6):
    x = np.arange(elements, dtype=np.float32)
    y = x.copy()
    y[1] = 9
    write_pt2(
        tmp_path / "a.pt2", {"enc.w": (FLOAT32, [elements], x.tobytes()), "old": (FLOAT32, [1], b"\0" * 4)}
    )
    write_pt2(
        tmp_path / "b.pt2", {"enc.w": (FLOAT32, [elements], y.tobytes()), "new": (FLOAT32, [2], b"\0" * 8)}
    )
    return str(tmp_path / "a.pt2"), str(tmp_path / "b.pt2")
