"""JSON nested deeper than json.dumps can write: placeholders expanded as text."""

from __future__ import annotations

import json
import re
from typing import Any

LEAVES: list[str] = []


def nested(depth: int, leaf: Any) -> str:
    """A placeholder that `dumps` expands to JSON nested `depth` deep (json.dumps would recurse)."""
    LEAVES.append(json.dumps(leaf))
    return f"@@deep:{depth}:{len(LEAVES) - 1}@@"


def dumps(document: Any) -> bytes:
    def expand(match: re.Match) -> str:
        depth, leaf = int(match.group(1)), LEAVES[int(match.group(2))]
        opening = "".join('{"k": ' if i % 2 else "[" for i in range(depth))
        closing = "".join("}" if i % 2 else "]" for i in reversed(range(depth)))
        return opening + leaf + closing

    text = re.sub(r'"@@deep:(\d+):(\d+)@@"', expand, json.dumps(document))
    return text.encode()


def forget() -> None:
    """Drop the leaves of the placeholders made so far (one case's worth)."""
    del LEAVES[:]
