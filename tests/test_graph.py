"""The exported program's graph read by the reader, with torch as the oracle: torch loads the
same archive and its ExportedProgram gives the node count, the operators in order and the
signature. Malformed programs are ArchiveFormatError; the program is read only when asked."""

from __future__ import annotations

import json
import operator
import pathlib

import pytest

import reader
from reader.pt2.graph import parse_graph
from testing.checks import run
from testing.paths import ARCHIVES
from testing.torch_oracle import needs_torch

pytestmark = pytest.mark.unit

# pickled.pt2 holds a forged custom object torch itself cannot load: parsed below, not compared
FIXTURES = ["layouts", "dtypes", "two_models", "no_weights", "many"]


def _torch_programs(path: pathlib.Path) -> dict:
    from torch.export.pt2_archive._package import load_pt2

    return load_pt2(str(path)).exported_programs


def _torch_view(program) -> list[tuple[str, str, str]]:
    """(op, name, target) per node as torch shows them, without the getitem nodes torch adds
    when it loads a multi-output operator (the serialized program keeps outputs on the node)."""
    out = []
    for node in program.graph.nodes:
        if node.op == "call_function" and node.target is operator.getitem:
            continue
        target = str(node.target).removeprefix("torch.ops.") if node.op == "call_function" else node.op
        out.append((node.op, node.name, target))
    return out


def _ours(graph) -> list[tuple[str, str, str]]:
    return [
        (node.op, node.name, node.target if node.op == "call_function" else node.op) for node in graph.nodes
    ]


# torch's InputKind / OutputKind names → the serialized union keys our signature keeps
SERIALIZED_KINDS = {"constant_tensor": "tensor_constant"}


def _kind(spec) -> str:
    name = spec.kind.name.lower()
    return SERIALIZED_KINDS.get(name, name)


def _check_against_torch(path: pathlib.Path) -> int:
    programs = _torch_programs(path)

    async def go():
        async with reader.open_archive(path) as ar:
            assert sorted(ar.models) == sorted(programs)
            checked = 0
            for model, program in programs.items():
                graph = await ar.graph(model=model)
                assert _ours(graph) == _torch_view(program), model
                expected = [(_kind(s), s.arg.name, s.target) for s in program.graph_signature.input_specs]
                got = [(s.kind, s.placeholder, s.target) for s in graph.signature_inputs]
                assert got == expected
                outputs = [(_kind(s), s.arg.name) for s in program.graph_signature.output_specs]
                assert [(s.kind, s.value) for s in graph.signature_outputs] == outputs
                # value metadata: every call_function output has the dtype and shape torch recorded
                for node in program.graph.nodes:
                    value = node.meta.get("val")
                    if node.op == "call_function" and hasattr(value, "shape") and node.name in graph.values:
                        ours = graph.values[node.name]
                        assert ours.shape == tuple(value.shape), node.name
                        assert ours.dtype == str(value.dtype).removeprefix("torch."), node.name
                checked += len(graph.nodes)
            return checked

    return run(go())


@needs_torch
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_graphs_match_torch(name):
    assert _check_against_torch(ARCHIVES / f"{name}.pt2") > 0


@needs_torch
def test_tiny_gpt_graph_matches_torch(tmp_path):
    from testing.graph_programs import save_program, tiny_gpt

    path = save_program(*tiny_gpt(), tmp_path / "gpt.pt2")
    _check_against_torch(path)

    async def go():
        async with reader.open_archive(path) as ar:
            return await ar.graph()

    graph = run(go())
    # module paths come from nn_module_stack, nested by the stack
    assert "aten.split.Tensor" in {n.target for n in graph.nodes if n.module == "h.1.attn"}
    assert [n.target for n in graph.nodes if n.module == "h.1.attn.c_attn"] == ["aten.linear.default"]
    assert graph.modules["h.1.attn.c_attn"].parent == "h.1.attn"
    assert graph.modules["h.1.attn"].parent == "h.1"
    assert graph.modules["h.1"].parent == ""
    assert graph.modules["h.1.attn"].type.endswith("Attention")
    # a multi-output operator keeps its outputs (torch's getitem nodes) on the node
    split = next(n for n in graph.nodes if n.target == "aten.split.Tensor")
    assert len(split.outputs) == 3
    # the tied embedding: both names are signature entries, and their consumers are listed
    consumers = graph.tensor_consumers()
    assert {"wte.weight", "lm_head.weight"} <= set(consumers)
    tied = set(consumers["wte.weight"]) | set(consumers["lm_head.weight"])
    targets = {n.name: n.target for n in graph.nodes}
    assert {targets[n] for n in tied} == {"aten.embedding.default", "aten.linear.default"}
    # placeholders name their FQN; constants are values, tensors are references
    assert next(n for n in graph.nodes if n.name == "p_wpe_weight").tensor == "wpe.weight"
    split_size = next(a for a in split.inputs if a.name == "split_size")
    assert split_size.value == 16 and split_size.tensors == ()


@pytest.mark.parametrize("name", [*FIXTURES, "pickled", "zero_payload", "many_deflate"])
def test_every_fixture_program_parses(name):
    async def go():
        async with reader.open_archive(ARCHIVES / f"{name}.pt2") as ar:
            return [await ar.graph(model=model) for model in ar.models]

    for graph in run(go()):
        assert graph.nodes[-1].op == "output" and len({n.name for n in graph.nodes}) == len(graph.nodes)
        names = {n.name for n in graph.nodes}
        assert set(graph.consumers()) <= {v for n in graph.nodes for v in n.outputs}
        assert {c for readers in graph.consumers().values() for c in readers} <= names


def test_two_models_and_no_weights():
    async def go():
        async with reader.open_archive(ARCHIVES / "two_models.pt2") as ar:
            enc, dec = await ar.graph(model="encoder"), await ar.graph(model="decoder")
            with pytest.raises(reader.ModelNotFound):
                await ar.graph()  # two models, none called "model"
        async with reader.open_archive(ARCHIVES / "no_weights.pt2") as ar:
            bare = await ar.graph()
        return enc, dec, bare

    enc, dec, bare = run(go())
    assert enc.model == "encoder" and dec.model == "decoder"
    assert "norm.weight" in enc.tensor_consumers() and "norm.weight" not in dec.tensor_consumers()
    assert [n.op for n in bare.nodes] == ["placeholder", "call_function", "call_function", "output"]
    assert bare.tensor_consumers() == {}
    as_json = json.loads(json.dumps(bare.to_dict()))
    assert len(as_json["nodes"]) == 4 and as_json["nodes"][-1]["op"] == "output"


def test_program_is_read_lazily_and_once():
    async def go():
        async with reader.open_archive(ARCHIVES / "layouts.pt2") as ar:
            before = ar.source.stats.bytes
            first = await ar.graph()
            after = ar.source.stats.bytes
            again = await ar.graph()
            assert ar.source.stats.bytes == after  # kept, not read twice
            return before, after, first is again

    before, after, same = run(go())
    assert after > before and same


def test_program_size_cap_is_a_typed_error():
    async def go():
        async with reader.open_archive(ARCHIVES / "layouts.pt2") as ar:
            await ar.graph(max_bytes=1000)

    with pytest.raises(reader.ArchiveFormatError, match="program cap"):
        run(go())


def _program(**graph) -> dict:
    base = {"inputs": [], "outputs": [], "nodes": [], "tensor_values": {}}
    return {
        "graph_module": {"graph": {**base, **graph}, "signature": {"input_specs": [], "output_specs": []}}
    }


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"graph_module": {}}',
        json.dumps(_program(nodes=[{"target": 7}])).encode(),
        json.dumps(_program(nodes=[{"target": "x", "inputs": [{"name": "a", "arg": []}]}])).encode(),
        json.dumps(_program(inputs=[{"as_tensor": {"name": "x"}}, {"as_tensor": {"name": "x"}}])).encode(),
        json.dumps(
            _program(nodes=[{"target": "x", "metadata": {"nn_module_stack": "no commas here"}}])
        ).encode(),
        b'{"graph_module": {"graph": {"nodes": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}}",
    ],
)
def test_malformed_programs_are_typed_errors(raw):
    with pytest.raises(reader.ArchiveFormatError):
        parse_graph(raw, "model")


def test_unknown_fields_are_ignored():
    program = _program(
        inputs=[{"as_tensor": {"name": "x"}}],
        outputs=[{"as_tensor": {"name": "y"}}],
        nodes=[
            {
                "target": "torch.ops.aten.future_op.default",
                "inputs": [{"name": "self", "arg": {"as_tensor": {"name": "x"}}, "kind": 9, "new": 1}],
                "outputs": [{"as_tensor": {"name": "y"}}],
                "metadata": {"nn_module_stack": "L__self__,,M;L__self___a,a,A", "brand_new": "x"},
                "future_field": {"deep": [1, 2]},
            },
            {"target": "t", "inputs": [{"name": "v", "arg": {"as_future_union": {"q": 1}}}], "outputs": []},
        ],
        tensor_values={"y": {"dtype": 99, "sizes": [{"as_int": 2}, {"as_expr": {"expr_str": "s0"}}]}},
    )
    program["graph_module"]["new_top"] = {"anything": True}
    graph = parse_graph(json.dumps(program).encode(), "model")
    assert [n.op for n in graph.nodes] == ["placeholder", "call_function", "call_function", "output"]
    assert graph.nodes[1].target == "aten.future_op.default" and graph.nodes[1].module == "a"
    assert graph.values["y"].dtype is None and graph.values["y"].shape == (2, None)
    assert graph.nodes[2].inputs[0].value == {"as_future_union": {"q": 1}}
    assert graph.consumers()["x"] == ["y"] and graph.consumers()["y"] == ["output"]


@needs_torch
def test_consumers_of_a_tied_weight_include_both_names(tmp_path):
    from testing.graph_programs import save_program, tiny_gpt

    path = save_program(*tiny_gpt(), tmp_path / "gpt.pt2")

    async def go():
        async with reader.open_archive(path) as ar:
            return await ar.consumers("wte.weight"), await ar.consumers("lm_head.weight"), ar.tensors()

    wte, head, tensors = run(go())
    names = {t.name for t in tensors}
    if "lm_head.weight" not in names:  # torch keeps one name of a tied pair in some versions
        pytest.skip(f"this torch saved one name of the tied pair: {sorted(names)[:4]}...")
    assert wte.aliases == ("lm_head.weight",) and head.aliases == ("wte.weight",)
    assert {c.target for c in wte.consumers} == {"aten.embedding.default", "aten.linear.default"}
    assert [c.node for c in wte.consumers] == [c.node for c in head.consumers]
    assert {c.via for c in wte.consumers} <= {"wte.weight", "lm_head.weight"}


def test_consumers_of_plain_weights():
    async def go():
        async with reader.open_archive(ARCHIVES / "layouts.pt2") as ar:
            return await ar.consumers("conv.weight"), await ar.consumers("lin1.bias")

    conv, bias = run(go())
    assert conv.placeholder == "p_conv_weight" and [c.node for c in conv.consumers] == ["conv2d"]
    assert conv.consumers[0].module == "conv" and conv.aliases == ()
    assert [c.node for c in bias.consumers] == ["linear"]
