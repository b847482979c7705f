"""ExecuTorch as the oracle of .ptd files: its reader, its own writer, and torch's bytes.

Everything here imports torch/executorch lazily; tests mark themselves with
`needs_executorch` so a machine without them skips with a reason.
"""

from __future__ import annotations

import functools
import importlib.util
import pathlib
import tempfile
from dataclasses import dataclass

import pytest

HAVE_EXECUTORCH = (
    importlib.util.find_spec("torch") is not None and importlib.util.find_spec("executorch") is not None
)
needs_executorch = pytest.mark.skipif(
    not HAVE_EXECUTORCH, reason="executorch (and torch) not installed: pip install -e '.[test]'"
)


@dataclass(frozen=True)
class PtdKey:
    scalar_type: int
    sizes: tuple[int, ...]
    dim_order: tuple[int, ...]
    data: bytes


def read_ptd(blob: bytes) -> dict[str, PtdKey]:
    """ExecuTorch's FlatTensorSerializer().deserialize, key by key."""
    from executorch.exir._serialize._cord import Cord
    from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

    payload = FlatTensorSerializer().deserialize(Cord(blob))
    out = {}
    for key, entry in payload.named_data.items():
        layout = entry.tensor_layout
        out[key] = PtdKey(
            int(layout.scalar_type),
            tuple(layout.sizes),
            tuple(layout.dim_order),
            bytes(payload.buffers[entry.buffer_index]),
        )
    return out


def to_executorch(exported_program):
    """An ExecutorchProgramManager whose constants live outside the .pte."""
    from executorch.exir import ExecutorchBackendConfig, to_edge

    return to_edge(exported_program).to_executorch(ExecutorchBackendConfig(external_constants=True))


def program_files(manager) -> tuple[bytes, bytes | None]:
    """(.pte bytes, .ptd bytes) as ExecuTorch writes them; no .ptd for a program without constants."""
    with tempfile.TemporaryDirectory() as folder:
        manager.write_tensor_data_to_file(folder)
        files = list(pathlib.Path(folder).glob("*.ptd"))
        assert len(files) <= 1, files
        return manager.buffer, files[0].read_bytes() if files else None


def exported_programs(path: pathlib.Path) -> dict:
    from torch.export.pt2_archive._package import load_pt2

    return load_pt2(str(path)).exported_programs


@functools.cache
def executorch_ptd(path: pathlib.Path, model: str) -> bytes | None:
    """The .ptd ExecuTorch writes for one model of an archive (cached: an export takes seconds)."""
    return program_files(to_executorch(exported_programs(path)[model]))[1]


def torch_bytes(tensor) -> bytes:
    """The bytes ExecuTorch's emitter stores for a constant, computed with torch alone.

    Row-major and channels_last tensors keep their memory layout, everything else
    is made contiguous; a view is cloned to its own storage.
    """
    import torch

    if not (tensor.is_contiguous() or tensor.is_contiguous(memory_format=torch.channels_last)):
        tensor = tensor.contiguous()
    if tensor.nbytes != tensor.untyped_storage().nbytes():
        tensor = tensor.clone()
    return bytes(tensor.untyped_storage().tolist())
