"""Three small models exported three ways: a .pt2 archive, ExecuTorch's .pte with external constants
and ExecuTorch's own .ptd; plus an archive that carries its program (package_pt2 executorch_files).

They exercise what the .ptd writer must get right for a real runtime: a transposed parameter (MLP),
conv weights and batch-norm buffers including an int64 one (conv net), an embedding tied to the
output head and a lifted constant (transformer block).
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

from testing.executorch_oracle import program_files, to_executorch


@dataclass(frozen=True)
class ExportedModel:
    name: str
    archive: pathlib.Path  # torch.export.save of the model
    pte: bytes  # ExecuTorch program, constants external
    executorch_ptd: bytes  # the .ptd ExecuTorch writes for it
    inputs: tuple
    expected: object  # torch's output


def _models():
    import torch
    from torch import nn

    torch.manual_seed(20240601)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(16, 32)
            self.fc2 = nn.Linear(32, 8)
            self.proj = nn.Parameter(torch.randn(8, 8).t())  # dense, not contiguous

        def forward(self, x):
            return torch.relu(self.fc1(x)).matmul(self.fc2.weight.t()) @ self.proj + self.fc2.bias

    class ConvNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3)
            self.bn = nn.BatchNorm2d(8)
            self.conv2 = nn.Conv2d(8, 4, 3)
            with torch.no_grad():
                self.bn.running_mean.uniform_(-0.5, 0.5)
                self.bn.running_var.uniform_(0.5, 1.5)

        def forward(self, x):
            return self.conv2(torch.relu(self.bn(self.conv1(x)))).mean(dim=(2, 3))

    class Block(nn.Module):
        def __init__(self, vocab=50, dim=32):
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            self.norm1 = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.out = nn.Linear(dim, dim)
            self.norm2 = nn.LayerNorm(dim)
            self.up = nn.Linear(dim, 2 * dim)
            self.down = nn.Linear(2 * dim, dim)
            self.head = nn.Linear(dim, vocab, bias=False)
            self.head.weight = self.embed.weight  # tied
            self.scale = torch.tensor(dim**-0.5)  # a plain tensor attribute: a lifted constant

        def forward(self, ids):
            h = self.embed(ids)
            q, k, v = self.qkv(self.norm1(h)).chunk(3, dim=-1)
            attention = torch.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1)
            h = h + self.out(attention @ v)
            h = h + self.down(torch.nn.functional.gelu(self.up(self.norm2(h))))
            return self.head(h)

    return {
        "mlp": (MLP(), (torch.randn(4, 16),)),
        "convnet": (ConvNet(), (torch.randn(2, 3, 12, 12),)),
        "block": (Block(), (torch.randint(0, 50, (1, 10)),)),
    }


def export_models(folder: pathlib.Path) -> dict[str, ExportedModel]:
    """Export every model (seconds each: callers cache the result for the session)."""
    import torch

    out = {}
    for name, (module, inputs) in _models().items():
        module.eval()
        with torch.no_grad():
            expected = module(*inputs)
        program = torch.export.export(module, inputs, strict=False)
        archive = folder / f"{name}.pt2"
        torch.export.save(program, str(archive))
        pte, ptd = program_files(to_executorch(torch.export.load(str(archive))))
        assert ptd is not None
        out[name] = ExportedModel(name, archive, pte, ptd, inputs, expected)
    return out


def package_with_program(model: ExportedModel, path: pathlib.Path) -> pathlib.Path:
    """An archive holding the exported program, its weights and its ExecuTorch program."""
    import torch
    from torch.export.pt2_archive._package import package_pt2

    package_pt2(
        str(path),
        exported_programs={"model": torch.export.load(str(model.archive))},
        executorch_files={"model.pte": model.pte},
    )
    return path


def run_program(pte_path: pathlib.Path, ptd_path: pathlib.Path, inputs: tuple) -> list:
    """Load a program with its data file through ExecuTorch's runtime and run `forward`."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(pte_path), data_path=str(ptd_path))
    return program.load_method("forward").execute(list(inputs))
