"""GPT-2-shaped archives for bench/load_model.py, generated once with torch and cached.

- gpt2: GPT-2 small's weights (vocab 50257, 1024 positions, 768 wide, 12 layers): 124 M float32
  parameters, 149 names, the token embedding tied to the output head (one payload, two names):
  a 498 MB .pt2.
- gpt2-2g: the same shape 1280 wide with 24 layers: 538 M parameters, a 2.15 GB .pt2.

Beside each archive, NAME.safetensors holds the same weights with the tied one stored once (what
`save_model` writes), for the safetensors and runai-model-streamer rows. Values are random (seeded):
these archives exist for their shape and size. torch is needed only here (`python
bench/make_gpt2.py [--config gpt2-2g]` makes them ahead of a run).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import tempfile
import time

CONFIGS = {
    "gpt2": {"vocab": 50257, "positions": 1024, "width": 768, "layers": 12},
    "gpt2-2g": {"vocab": 50257, "positions": 1024, "width": 1280, "layers": 24},
}
DEFAULT_CACHE = pathlib.Path("/tmp/pt2serve-bench")


def _module(vocab: int, positions: int, width: int, layers: int):
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(width)
            self.attn = nn.Module()
            self.attn.c_attn = nn.Linear(width, 3 * width)
            self.attn.c_proj = nn.Linear(width, width)
            self.ln_2 = nn.LayerNorm(width)
            self.mlp = nn.Module()
            self.mlp.c_fc = nn.Linear(width, 4 * width)
            self.mlp.c_proj = nn.Linear(4 * width, width)

        def forward(self, x):
            h = self.ln_1(x)
            q, k, v = self.attn.c_attn(h).split(width, dim=-1)
            x = x + self.attn.c_proj(torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v)
            return x + self.mlp.c_proj(torch.nn.functional.gelu(self.mlp.c_fc(self.ln_2(x))))

    class GPT2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(vocab, width)
            self.wpe = nn.Embedding(positions, width)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(width)
            self.lm_head = nn.Linear(width, vocab, bias=False)
            self.lm_head.weight = self.wte.weight  # tied, as GPT-2's

        def forward(self, tokens):
            x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[-1]))
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return GPT2()


def ensure_gpt2(
    config: str = "gpt2", cache_dir: pathlib.Path = DEFAULT_CACHE
) -> tuple[pathlib.Path, pathlib.Path]:
    """(the .pt2, the .safetensors) of `config`, generated if missing."""
    archive, tensors = cache_dir / f"{config}.pt2", cache_dir / f"{config}.safetensors"
    if archive.exists() and tensors.exists():
        return archive, tensors
    import torch
    from safetensors.torch import save_model

    torch.manual_seed(0)
    model = _module(**CONFIGS[config]).eval()
    cache_dir.mkdir(parents=True, exist_ok=True)
    print(f"generating {archive} (torch {torch.__version__}) ...", flush=True)
    started = time.perf_counter()
    with torch.no_grad():
        exported = torch.export.export(model, (torch.zeros(1, 8, dtype=torch.long),))
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:  # torch names the root folder after the file
        partial = pathlib.Path(tmp, archive.name)
        torch.export.save(exported, str(partial))
        os.replace(partial, archive)
        partial = pathlib.Path(tmp, tensors.name)
        save_model(model, str(partial))  # the tied weight once
        os.replace(partial, tensors)
    print(f"  {archive.stat().st_size / 1e6:.0f} MB .pt2, {tensors.stat().st_size / 1e6:.0f} MB "
          f".safetensors, {time.perf_counter() - started:.1f} s", flush=True)  # fmt: skip
    return archive, tensors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="gpt2")
    parser.add_argument("--cache-dir", type=pathlib.Path, default=DEFAULT_CACHE)
    args = parser.parse_args()
    print(*ensure_gpt2(args.config, args.cache_dir))


if __name__ == "__main__":
    main()
