"""Two versions of one torch-written archive that differ in a few tensors (a small fine-tune).

`write_version(path, 1)` and `write_version(path, 2)` export the same module; version 2
changes CHANGED (two weights) and leaves every other tensor's bytes as they were.
"""

from __future__ import annotations

import pathlib
import shutil

import pytest

CHANGED = ("blocks.1.weight", "head.bias")


def write_version(path: pathlib.Path, version: int, *, width: int = 64, depth: int = 4) -> pathlib.Path:
    """Export the module at `version` to `path` (replaced by a rename, as a deploy would)."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(depth)))
            self.norm = torch.nn.LayerNorm(width)
            self.head = torch.nn.Linear(width, 8)
            self.register_buffer("scale", torch.arange(width, dtype=torch.float32))

        def forward(self, x):
            return self.head(self.norm(self.blocks(x) * self.scale))

    torch.manual_seed(1234)
    net = Net().eval()
    if version >= 2:
        with torch.no_grad():
            for name, tensor in net.state_dict().items():
                if name in CHANGED:
                    tensor.add_(version)
    program = torch.export.export(net, (torch.randn(2, width),), strict=False)
    staging = path.parent / f".staging-v{version}" / path.name  # same file name: same root folder
    staging.parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, str(staging))
    staging.replace(path)
    return path


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory):
    """Two torch-written versions of one archive (version 2 changes CHANGED), written once."""
    pytest.importorskip("torch", reason="torch writes the two archive versions")
    out = tmp_path_factory.mktemp("versions")
    return write_version(out / "v1" / "net.pt2", 1), write_version(out / "v2" / "net.pt2", 2)


def deploy(source, target) -> None:
    """Replace `target` by a rename, as a deploy does (readers of the old file keep its bytes)."""
    staging = target.with_name(target.name + ".new")
    shutil.copy2(source, staging)
    staging.replace(target)
