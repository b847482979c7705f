"""The repository's Dockerfile as the deployment tests read it."""

from __future__ import annotations

import json
import re

from testing.paths import REPO

DOCKERFILE = REPO / "Dockerfile"


def dockerfile_volumes(text: str) -> list[str]:
    """The paths the Dockerfile's VOLUME lines declare: the writable paths of its read-only image."""
    paths: list[str] = []
    for spec in re.findall(r"^VOLUME\s+(.+)$", text, re.M):
        paths += json.loads(spec) if spec.startswith("[") else spec.split()
    return paths
