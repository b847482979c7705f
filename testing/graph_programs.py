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


def stacked_archive(path: pathlib.Path, stages: int, blocks: int, workdir: pathlib.Path) -> pathlib.Path:
    """A program of `stages x blocks` small blocks (4 operators and 4 weights each, so 8 nodes a
    block) without exporting them all (that takes a minute for 10,000 nodes): torch exports and
    saves ONE block, then the block's serialized nodes, placeholders, signature entries and
    weight configs are repeated with renamed values and module paths, chained output to input.
    Every block's weights share the first block's payloads, so each weight is readable."""
    import json
    import zipfile

    one = save_program(*deep_stack(1, 1), workdir / "one_block.pt2")
    with zipfile.ZipFile(one) as zf:
        entries = [(info.filename, zf.read(info)) for info in zf.infolist()]
    root = entries[0][0].split("/")[0]
    program = json.loads(dict(entries)[f"{root}/models/model.json"])
    config_name = f"{root}/data/weights/model_weights_config.json"
    config = json.loads(dict(entries)[config_name])
    module = program["graph_module"]
    graph, signature = module["graph"], module["signature"]
    template_nodes = json.dumps(graph["nodes"])
    values = graph["tensor_values"]
    params = [spec for spec in signature["input_specs"] if "parameter" in spec]
    param_inputs = json.dumps(params)
    outputs = ["linear", "relu", "add", "layer_norm"]

    def renamed(text: str, i: int, j: int, k: int, x: str) -> str:
        text = text.replace("stages.0.0", f"stages.{i}.{j}").replace("stages_0_0", f"stages_{i}_{j}")
        text = text.replace("L__self__stages.0,stages.0,", f"L__self__stages.{i},stages.{i},")
        for name in outputs:
            text = text.replace(f'"name": "{name}"', f'"name": "{name}_b{k}"')
        return text.replace('"name": "x"', f'"name": "{x}"')

    nodes, specs, tensor_values, weights = [], [], {}, {}
    x = "x"
    for k in range(stages * blocks):
        i, j = divmod(k, blocks)
        nodes += json.loads(renamed(template_nodes, i, j, k, x))
        specs += json.loads(renamed(param_inputs, i, j, k, x))
        for name in outputs:
            tensor_values[f"{name}_b{k}"] = values[name]
        x = f"layer_norm_b{k}"
    for spec in specs:
        placeholder, fqn = spec["parameter"]["arg"]["name"], spec["parameter"]["parameter_name"]
        first = fqn.split(".", 3)[3]  # fc.weight, norm.bias, ...
        tensor_values[placeholder] = values[f"p_stages_0_0_{first.replace('.', '_')}"]
        weights[fqn] = config["config"][f"stages.0.0.{first}"]
    tensor_values["x"] = values["x"]
    graph["nodes"] = nodes
    graph["inputs"] = [{"as_tensor": {"name": s["parameter"]["arg"]["name"]}} for s in specs]
    graph["inputs"].append({"as_tensor": {"name": "x"}})
    graph["outputs"] = [{"as_tensor": {"name": x}}]
    graph["tensor_values"] = tensor_values
    signature["input_specs"] = [*specs, {"user_input": {"arg": {"as_tensor": {"name": "x"}}}}]
    signature["output_specs"] = [{"user_output": {"arg": {"as_tensor": {"name": x}}}}]
    replaced = {
        f"{root}/models/model.json": json.dumps(program).encode(),
        config_name: json.dumps({"config": weights}).encode(),
    }
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in entries:
            zf.writestr(name, replaced.get(name, data))
    return path
