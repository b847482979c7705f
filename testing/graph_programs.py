"""Programs for the graph tests, written by torch: a small GPT-like model (tied embedding and
head, attention split into q/k/v, blocks in a ModuleList) and a deep stack of small blocks for
the 10,000-node viewer test. Import only where torch is installed."""

from __future__ import annotations

import pathlib


def tiny_gpt(layers: int = 2, width: int = 16, vocab: int = 50, heads: int = 2):
    """An nn.Module like GPT-2 in miniature (wte tied to lm_head) and example inputs."""
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(width, 3 * width)
            self.c_proj = nn.Linear(width, width)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(x).split(width, dim=2)
            q = q.view(b, t, heads, c // heads).transpose(1, 2)
            k = k.view(b, t, heads, c // heads).transpose(1, 2)
            v = v.view(b, t, heads, c // heads).transpose(1, 2)
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(b, t, c))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(width)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class TinyGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, width)
            self.wpe = nn.Embedding(8, width)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(width)
            self.lm_head = nn.Linear(width, vocab, bias=False)
            self.lm_head.weight = self.wte.weight  # tied, as in GPT-2

        def forward(self, idx):
            pos = torch.arange(idx.shape[1])
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    torch.manual_seed(0)
    return TinyGPT().eval(), (torch.randint(0, vocab, (1, 8)),)


def deep_stack(stages: int, blocks: int):
    """stages x blocks small blocks (Linear, ReLU, residual add, LayerNorm: 4 nodes and 4 weights
    each), grouped two levels deep: `stages.<i>.<j>`."""
    import torch
    from torch import nn

    class Small(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.norm = nn.LayerNorm(4)

        def forward(self, x):
            return self.norm(x + torch.relu(self.fc(x)))

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.stages = nn.ModuleList(
                nn.Sequential(*(Small() for _ in range(blocks))) for _ in range(stages)
            )

        def forward(self, x):
            for stage in self.stages:
                x = stage(x)
            return x

    torch.manual_seed(0)
    return Stack().eval(), (torch.randn(2, 4),)


def save_program(module, args, path: pathlib.Path) -> pathlib.Path:
    import torch

    program = torch.export.export(module, args, strict=False)
    torch.export.save(program, str(path))
    return path
