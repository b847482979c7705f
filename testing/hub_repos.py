"""The repositories the fake Hub (testing/fakehub.py) serves in the hf:// tests: two versions of a small
archive under moving and pinned revisions, a dataset, and a gated repository with a torch.save file."""

from __future__ import annotations

import pathlib

import numpy as np

from testing.fakehub import HubRepo, commit_of
from testing.paths import CONTAINERS
from testing.zipbytes import write_pt2

FLOAT32 = 7


CHECKPOINT = CONTAINERS / "torch-2.13" / "checkpoint.pt"


C1, C2, C3, C4 = (commit_of(name) for name in ("c1", "c2", "c3", "c4"))


TOKEN = "hf_test_token"


def weights(seed: int) -> dict[str, bytes]:
    """Version `seed`'s tensors: a small one and a big one (the big one redirected to the CDN)."""
    rng = np.random.default_rng(seed)
    return {"small": rng.standard_normal(64, dtype=np.float32).tobytes(),
            "big": rng.standard_normal(400_000, dtype=np.float32).tobytes()}  # fmt: skip


def archive_bytes(tmp: pathlib.Path, seed: int) -> bytes:
    path = tmp / f"v{seed}.pt2"
    write_pt2(path, {name: (FLOAT32, [len(data) // 4], data) for name, data in weights(seed).items()})
    return path.read_bytes()


def repos(tmp: pathlib.Path) -> list[HubRepo]:
    """The repositories, their archives written under `tmp`."""
    v1, v2 = archive_bytes(tmp, 1), archive_bytes(tmp, 2)
    return [
        HubRepo(
            "org/model",
            {
                C1: {"model.pt2": v1, "direct.pt2": v1, "config.json": b"{}"},
                C2: {"model.pt2": v2, "direct.pt2": v2},
            },
            {"main": C1, "refs/pr/1": C2},
            small=(".json", "direct.pt2"),
        ),
        HubRepo("datasets/org/data", {C3: {"sub/dir/model.pt2": v2}}, {"main": C3}),
        HubRepo(
            "org/gated",
            {C4: {"model.pt2": v1, "pytorch_model.bin": CHECKPOINT.read_bytes()}},
            {"main": C4},
            gated_token=TOKEN,
        ),
    ]
