"""The checkpoint, not the program's constants: `safe_open`'s `keys()`, DCP's metadata and the vLLM
format's weights are the exported model's `state_dict()` (parameters and persistent buffers, tied
names included), never its non-persistent buffers or lifted tensor constants; those stay readable by
name. The rule (reader.loading.selection.checkpoint) reads the payload configs only; here it is held
to the program's own signature and to torch's `module.state_dict()` on programs exported now."""

from __future__ import annotations

import pathlib

import pytest

import reader
import reader.torch
from reader.integrations.vllm.weights import iter_weights

pytestmark = pytest.mark.unit

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")


class _Rotary(torch.nn.Module):
    """A Llama-style rotary embedding: its frequencies are a non-persistent buffer."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("original_inv_freq", inv_freq.clone(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1], dtype=torch.float32)
        angles = torch.outer(positions, self.inv_freq + 0 * self.original_inv_freq)
        return torch.cat([angles.cos(), angles.sin()], dim=-1)


class _Tied(torch.nn.Module):
    """Tied embedding and head, a persistent buffer, two non-persistent ones in a submodule, a lifted
    tensor constant and a bias: every kind of placeholder an exported model has."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(32, 8)
        self.rotary = _Rotary(8)
        self.norm = torch.nn.LayerNorm(8)
        self.head = torch.nn.Linear(8, 32)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.full((8,), 0.5))
        self.shift = torch.linspace(-1.0, 1.0, 8)  # a plain tensor attribute: a lifted constant

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(ids) * self.scale + self.shift + self.rotary(ids)
        return self.head(self.norm(hidden))


class _Plain(torch.nn.Module):
    """Nothing but parameters (and a bias-free layer)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 8, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


MODULES = {
    "tied": (_Tied, lambda: (torch.tensor([[1, 2, 3, 4]]),)),
    "plain": (_Plain, lambda: (torch.randn(2, 8),)),
}


@pytest.fixture(scope="module", params=sorted(MODULES))
def exported(request, tmp_path_factory) -> tuple[pathlib.Path, torch.nn.Module]:
    make, example = MODULES[request.param]
    torch.manual_seed(0)
    module = make().eval()
    path = tmp_path_factory.mktemp(request.param) / "model.pt2"
    torch.export.save(torch.export.export(module, example()), path)
    return path, module


def test_the_tied_module_has_every_kind_of_placeholder(tmp_path: pathlib.Path) -> None:
    """What the other tests rely on: torch lifts the rotary frequencies as non-persistent buffers
    and `shift` as a tensor constant, and neither is in the module's state dict."""
    program = torch.export.export(_Tied().eval(), MODULES["tied"][1]())
    specs = program.graph_signature.input_specs
    signature = {spec.target: (spec.kind.name, spec.persistent) for spec in specs}
    assert signature["rotary.inv_freq"] == ("BUFFER", False)
    assert signature["scale"] == ("BUFFER", True)
    assert signature["shift"] == ("CONSTANT_TENSOR", None)
    assert {"rotary.inv_freq", "rotary.original_inv_freq", "shift"} & set(_Tied().state_dict()) == set()


def test_safe_open_keys_are_the_module_s_state_dict(exported) -> None:
    path, module = exported
    with reader.safe_open(path) as f:
        assert f.keys() == sorted(module.state_dict())
        assert "pt2serve.skipped" not in f.metadata()
        for name, want in module.state_dict().items():
            assert torch.equal(f.get_tensor(name), want), name


def test_dcp_metadata_lists_the_module_s_state_dict_and_loads_it(exported) -> None:
    path, module = exported
    with reader.torch.StorageReader(path) as storage_reader:
        assert set(storage_reader.read_metadata().state_dict_metadata) == set(module.state_dict())
        state = {name: torch.zeros_like(value) for name, value in module.state_dict().items()}
        dcp.load(state, storage_reader=storage_reader, no_dist=True)  # a constant would be missing
    for name, want in module.state_dict().items():
        assert torch.equal(state[name], want), name


def test_the_vllm_weights_are_the_module_s_state_dict(exported) -> None:
    path, module = exported
    handed = list(iter_weights([str(path)]))
    assert sorted(name for name, _ in handed) == sorted(module.state_dict())
    for name, tensor in handed:
        assert torch.equal(tensor, module.state_dict()[name]), name


async def test_the_rule_agrees_with_the_program_s_signature(exported) -> None:
    """The payload configs and the graph's signature say the same: the state dict is the parameters
    and the persistent buffers."""
    from reader.loading.selection import checkpoint

    path, _ = exported
    async with reader.open_archive(path) as archive:
        graph = await archive.graph()
        chosen = {info.name for info in checkpoint(archive)}
    in_signature = {
        spec.target
        for spec in graph.signature_inputs
        if spec.kind == "parameter" or (spec.kind == "buffer" and spec.persistent)
    }
    assert chosen == in_signature


def test_the_program_s_constants_are_still_read_by_name(exported) -> None:
    path, module = exported
    program = torch.export.load(path)
    with reader.safe_open(path) as f:
        for name, want in program.constants.items():
            assert torch.equal(reader.torch.read(path, name), want), name
            with pytest.raises(reader.TensorNotFound, match="constant of the exported program"):
                f.get_tensor(name)
    assert set(reader.torch.load(path)) == set(module.state_dict()) | set(program.constants)


def test_a_torch_save_checkpoint_is_all_checkpoint(tmp_path: pathlib.Path) -> None:
    """No program, no constants: every tensor of a `torch.save` is handed over, as before."""
    module = _Tied()
    state = {**module.state_dict(), "rotary.inv_freq": module.rotary.inv_freq}
    path = tmp_path / "pytorch_model.bin"
    torch.save(state, path)
    with reader.safe_open(path) as f:
        assert f.keys() == sorted(state)
    with reader.torch.StorageReader(path) as storage_reader:
        assert set(storage_reader.read_metadata().state_dict_metadata) == set(state)
    assert sorted(name for name, _ in iter_weights([str(path)])) == sorted(state)
