"""torch's answers for the checked-in torch.save and AOTInductor fixtures (tests/fixtures/containers/
torch-*/expected.json), by version, the (version, file) cases of one container kind, and the newest
version's files."""

from __future__ import annotations

import json

from testing.paths import CONTAINER_VERSIONS as VERSIONS
from testing.paths import CONTAINERS

TRUTH = {version: json.loads((CONTAINERS / version / "expected.json").read_text()) for version in VERSIONS}


def cases(container: str) -> list[tuple[str, str]]:
    return [
        (version, name)
        for version, truth in TRUTH.items()
        for name, spec in truth["archives"].items()
        if spec["container"] == container
    ]


# the newest torch version's checkpoint and mixed package
VERSION = VERSIONS[-1]
CHECKPOINT = CONTAINERS / VERSION / "checkpoint.pt"
MIXED = CONTAINERS / VERSION / "mixed.pt2"
