"""The exported program's graph (`models/<model>.json`) as a compact, typed structure.

Sans-IO: `parse_graph(raw, model)` takes the entry's bytes and returns a `Graph`. msgspec
decodes only the fields the viewer needs (stack traces and the rest are skipped in C);
unknown or newer fields are ignored, as torch's own reader does, so newer writers still
load. A malformed program is an `ArchiveFormatError` naming the field.

The serialized graph (torch._export.serde.schema) keeps placeholders apart from the nodes
(`graph.inputs`) and the output as `graph.outputs`; `Graph.nodes` puts them back in graph
order, as torch's `ExportedProgram.graph` shows them: placeholders, operator nodes, output.
Multi-output operators keep their outputs on the node (torch adds `getitem` nodes for them
when it loads the program; the serialized form, and so this one, has none).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import msgspec

from ..errors import ArchiveFormatError
from .dtypes import BY_SERIALIZED
from .tensorinfo import TensorInfo

# Programs are JSON; past this a models/<model>.json is not one we should hold in memory.
MAX_PROGRAM_BYTES = 256 << 20
# ... nor past this many JSON values outside strings (each becomes a Python object: tens of bytes).
# GPT-2's program holds about 20,000; a program of 10,000 nodes about half a million.
MAX_PROGRAM_ELEMENTS = 4 << 20
# A JSON string, escapes included (the unrolled form: no backtracking however long it is).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
ST_DELIMITER = ";"  # torch.export serde: between nn_module_stack entries
TENSOR_LIST_KINDS = ("as_tensors", "as_optional_tensors")
# constant argument kinds whose payload is the value itself; others keep their union key
PLAIN_CONSTANTS = frozenset(
    [
        "as_int",
        "as_float",
        "as_ints",
        "as_floats",
        "as_string",
        "as_strings",
        "as_bool",
        "as_bools",
        "as_scalar_type",
        "as_memory_format",
        "as_layout",
        "as_device",
        "as_int_lists",
        "as_complex",
    ]
)


# ---- the serialized schema, only what is read (gc=False: no cycles possible) -------------------


class _SymInt(msgspec.Struct, gc=False):
    as_int: int | None = None  # None: symbolic (as_expr), shown as null


class _TensorMeta(msgspec.Struct, gc=False):
    dtype: int = 0
    sizes: list[_SymInt] = []


class _NamedArgument(msgspec.Struct, gc=False):
    name: str
    arg: dict[str, Any]  # a one-key union: as_tensor, as_int, as_tensors, as_none, ...


class _NodeMetadata(msgspec.Struct, frozen=True, gc=False):
    nn_module_stack: str | None = None


class _Node(msgspec.Struct, gc=False):
    target: str
    inputs: list[_NamedArgument] = []
    outputs: list[dict[str, Any]] = []
    metadata: _NodeMetadata = _NodeMetadata()
    name: str | None = None


class _Graph(msgspec.Struct, gc=False):
    inputs: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    nodes: list[_Node] = []
    tensor_values: dict[str, _TensorMeta] = {}


class _Signature(msgspec.Struct, frozen=True, gc=False):
    input_specs: list[dict[str, Any]] = []
    output_specs: list[dict[str, Any]] = []


class _GraphModule(msgspec.Struct, gc=False):
    graph: _Graph
    signature: _Signature = _Signature()


class _Program(msgspec.Struct, gc=False):
    graph_module: _GraphModule
    torch_version: str | None = None


_DECODER = msgspec.json.Decoder(_Program)


# ---- the parsed graph -------------------------------------------------------------------------


class TensorValue(msgspec.Struct, frozen=True, gc=False):
    """A value flowing along an edge: its dtype (torch name) and shape (None: symbolic size)."""

    name: str
    dtype: str | None
    shape: tuple[int | None, ...]


class NodeInput(msgspec.Struct, frozen=True, gc=False):
    """One argument of a node: the values it reads (`tensors`), or a constant (`value`)."""

    name: str
    tensors: tuple[str, ...] = ()
    value: Any = None
    is_list: bool = False  # a tensor list (torch.cat's inputs), even of one


class GraphNode(msgspec.Struct, frozen=True, gc=False):
    name: str
    op: str  # "placeholder" | "call_function" | "output"
    target: str  # the operator ("aten.linear.default"), or the placeholder's role
    inputs: tuple[NodeInput, ...]
    outputs: tuple[str, ...]  # value names this node produces
    module: str | None = None  # deepest module path from nn_module_stack ("" is the root)
    tensor: str | None = None  # placeholders: the parameter, buffer or constant's FQN


class SignatureInput(msgspec.Struct, frozen=True, gc=False):
    """One placeholder's role: parameter, buffer, tensor_constant, custom_obj, user_input, ..."""

    kind: str
    placeholder: str | None
    target: str | None = None  # the parameter/buffer/constant's FQN
    persistent: bool | None = None


class SignatureOutput(msgspec.Struct, frozen=True, gc=False):
    kind: str  # user_output, buffer_mutation, loss_output, ...
    value: str | None
    target: str | None = None


class ModuleInfo(msgspec.Struct, frozen=True, gc=False):
    path: str
    type: str
    parent: str | None  # None for the root module ("")


class Graph(msgspec.Struct, frozen=True, gc=False):
    model: str
    nodes: tuple[GraphNode, ...]
    inputs: tuple[str, ...]  # placeholder names, in order
    outputs: tuple[str | None, ...]  # value names the output node returns (None: not a tensor)
    signature_inputs: tuple[SignatureInput, ...]
    signature_outputs: tuple[SignatureOutput, ...]
    values: dict[str, TensorValue]
    modules: dict[str, ModuleInfo]
    torch_version: str | None = None

    def placeholders_by_target(self) -> dict[str, str]:
        """FQN of each parameter, buffer and constant → the placeholder that brings it in."""
        return {s.target: s.placeholder for s in self.signature_inputs if s.target and s.placeholder}

    def consumers(self) -> dict[str, list[str]]:
        """Value name → names of the nodes reading it, in graph order (each node once)."""
        readers: dict[str, list[str]] = {}
        for node in self.nodes:
            seen: set[str] = set()
            for arg in node.inputs:
                for value in arg.tensors:
                    if value not in seen:
                        seen.add(value)
                        readers.setdefault(value, []).append(node.name)
        return readers

    def tensor_consumers(self) -> dict[str, list[str]]:
        """FQN of each parameter, buffer and constant → the nodes reading its placeholder."""
        readers = self.consumers()
        return {fqn: readers.get(ph, []) for fqn, ph in self.placeholders_by_target().items()}

    def to_dict(self) -> dict[str, Any]:
        placeholders = self.placeholders_by_target()
        return {
            "model": self.model,
            "torch_version": self.torch_version,
            "nodes": [_node_dict(node, self.values) for node in self.nodes],
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "signature": {
                "inputs": msgspec.to_builtins(self.signature_inputs),
                "outputs": msgspec.to_builtins(self.signature_outputs),
            },
            "modules": {path: {"type": m.type, "parent": m.parent} for path, m in self.modules.items()},
            "tensors": {
                fqn: {"placeholder": placeholders[fqn], "consumers": readers}
                for fqn, readers in self.tensor_consumers().items()
            },
        }


def _node_dict(node: GraphNode, values: dict[str, TensorValue]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": node.name, "op": node.op, "target": node.target}
    if node.module is not None:
        out["module"] = node.module
    if node.tensor is not None:
        out["tensor"] = node.tensor
    inputs = []
    for arg in node.inputs:
        item: dict[str, Any] = {"name": arg.name}
        if arg.tensors or arg.is_list:
            item["tensors"] = list(arg.tensors)
        else:
            item["value"] = arg.value
        inputs.append(item)
    out["inputs"] = inputs
    outs = []
    for name in node.outputs:
        value = values.get(name)
        outs.append(
            {"name": name, "dtype": value.dtype, "shape": list(value.shape)} if value else {"name": name}
        )
    out["outputs"] = outs
    return out


# ---- parsing ----------------------------------------------------------------------------------


def parse_graph(raw: bytes | memoryview, model: str, where: str | None = None) -> Graph:
    """Parse one models/<model>.json; ArchiveFormatError for anything malformed."""
    where = where or f"models/{model}.json"
    if len(raw) > MAX_PROGRAM_BYTES:
        raise ArchiveFormatError(
            f"{where}: {len(raw)} bytes is over the {MAX_PROGRAM_BYTES}-byte program cap"
        )
    elements = count_elements(raw)
    if elements > MAX_PROGRAM_ELEMENTS:
        raise ArchiveFormatError(
            f"{where}: {elements} JSON values is over the {MAX_PROGRAM_ELEMENTS}-value program cap "
            "(MAX_PROGRAM_ELEMENTS); refusing to parse it"
        )
    try:
        program = _DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        raise ArchiveFormatError(f"{where}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ArchiveFormatError(f"{where}: not valid JSON ({exc})") from None
    except RecursionError:
        raise ArchiveFormatError(f"{where}: JSON nested too deeply") from None
    try:
        return _build(program, model, where)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ArchiveFormatError(f"{where}: malformed graph ({type(exc).__name__}: {exc})") from None


def count_elements(raw: bytes | memoryview, ceiling: int | None = None) -> int:
    """At least as many as the JSON values in `raw` (each value but a container's first follows a
    `,` or a `:`, and a container opens with `[` or `{`): those bytes counted, and once the count
    over all bytes passes `ceiling` (MAX_PROGRAM_ELEMENTS), those inside strings taken off again
    (stack traces are full of them). Memory: a string at a time."""
    ceiling = MAX_PROGRAM_ELEMENTS if ceiling is None else ceiling
    data = raw if isinstance(raw, bytes) else bytes(raw)
    marks = (b",", b":", b"[", b"{")
    total = 1 + sum(data.count(mark) for mark in marks)
    if total <= ceiling:
        return total
    for string in _JSON_STRING.finditer(data):
        text = string.group()
        total -= sum(text.count(mark) for mark in marks)
    return total


def _build(program: _Program, model: str, where: str) -> Graph:
    graph = program.graph_module.graph
    values = {name: _tensor_value(name, meta) for name, meta in graph.tensor_values.items()}
    modules: dict[str, ModuleInfo] = {}
    signature_inputs = tuple(
        _signature_input(spec, where) for spec in program.graph_module.signature.input_specs
    )
    signature_outputs = tuple(
        _signature_output(spec, where) for spec in program.graph_module.signature.output_specs
    )
    roles = {s.placeholder: s for s in signature_inputs if s.placeholder}
    nodes: list[GraphNode] = []
    names: set[str] = set()
    deepest: dict[str, str | None] = {}  # nn_module_stack string → module path (nodes share stacks)
    inputs: list[str] = []
    for i, arg in enumerate(graph.inputs):
        refs = _tensor_refs(arg)
        name = refs[0] if refs else _plain_name(arg, f"{where}: graph.inputs[{i}]")
        inputs.append(name)
        role = roles.get(name)
        kind, fqn = (role.kind, role.target) if role else ("user_input", None)
        nodes.append(GraphNode(name, "placeholder", kind, (), (name,), tensor=fqn))
    for i, raw_node in enumerate(graph.nodes):
        outputs = tuple(name for out in raw_node.outputs for name in _output_names(out))
        name = raw_node.name or (outputs[0] if outputs else f"node_{i}")
        stack = raw_node.metadata.nn_module_stack
        if stack not in deepest:
            deepest[stack] = _modules_from_stack(stack, modules, where)
        module = deepest[stack]
        nodes.append(
            GraphNode(
                name,
                "call_function",
                _short_target(raw_node.target),
                tuple(_node_input(a) for a in raw_node.inputs),
                outputs,
                module,
            )
        )
    outputs = tuple((_tensor_refs(out) or [None])[0] for out in graph.outputs)
    nodes.append(
        GraphNode(
            "output",
            "output",
            "output",
            tuple(NodeInput(f"out{i}", (v,) if v else ()) for i, v in enumerate(outputs)),
            (),
        )
    )
    for node in nodes:
        if node.name in names:
            raise ArchiveFormatError(f"{where}: node name {node.name!r} appears twice")
        names.add(node.name)
    return Graph(
        model=model,
        nodes=tuple(nodes),
        inputs=tuple(inputs),
        outputs=outputs,
        signature_inputs=signature_inputs,
        signature_outputs=signature_outputs,
        values=values,
        modules=modules,
        torch_version=program.torch_version,
    )


def _short_target(target: str) -> str:
    return target.removeprefix("torch.ops.")


def _tensor_value(name: str, meta: _TensorMeta) -> TensorValue:
    dtype = BY_SERIALIZED.get(meta.dtype)
    return TensorValue(name, dtype.name if dtype else None, tuple(s.as_int for s in meta.sizes))


def _union(arg: dict[str, Any], where: str) -> tuple[str, Any]:
    """torch's schema unions are one-key objects; newer writers may add keys we do not know."""
    if not isinstance(arg, dict) or len(arg) != 1:
        raise ArchiveFormatError(f"{where}: expected a one-key union object, got {_preview(arg)}")
    return next(iter(arg.items()))


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _tensor_refs(arg: dict[str, Any]) -> list[str]:
    """Value names an argument refers to (as_tensor, tensor lists, optional tensors)."""
    if len(arg) != 1:
        return []
    kind, payload = next(iter(arg.items()))
    if kind in ("as_tensor", "as_optional_tensor") and isinstance(payload, dict):
        name = payload.get("name") if kind == "as_tensor" else (payload.get("as_tensor") or {}).get("name")
        return [name] if isinstance(name, str) else []
    if kind in TENSOR_LIST_KINDS and isinstance(payload, list):
        refs = []
        for item in payload:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                refs.append(item["name"])
            elif isinstance(item, dict) and isinstance((item.get("as_tensor") or {}).get("name"), str):
                refs.append(item["as_tensor"]["name"])
        return refs
    return []


def _plain_name(arg: dict[str, Any], where: str) -> str:
    """The name of a non-tensor graph input (a SymInt, a custom object, a token)."""
    _, payload = _union(arg, where)
    if isinstance(payload, dict):
        for key in ("name", "as_name"):
            if isinstance(payload.get(key), str):
                return payload[key]
    raise ArchiveFormatError(f"{where}: a graph input without a name: {_preview(arg)}")


def _output_names(out: dict[str, Any]) -> list[str]:
    refs = _tensor_refs(out)
    if refs:
        return refs
    if len(out) == 1:
        _, payload = next(iter(out.items()))
        if isinstance(payload, dict) and isinstance(payload.get("as_name"), str):
            return [payload["as_name"]]  # SymInt / SymBool outputs
        if isinstance(payload, dict) and isinstance(payload.get("name"), str):
            return [payload["name"]]
    return []


def _node_input(argument: _NamedArgument) -> NodeInput:
    arg = argument.arg
    kind = next(iter(arg), "") if len(arg) == 1 else ""
    refs = _tensor_refs(arg)
    if refs or kind in TENSOR_LIST_KINDS:
        return NodeInput(argument.name, tuple(refs), is_list=kind in TENSOR_LIST_KINDS)
    return NodeInput(argument.name, value=_constant(arg))


def _constant(arg: dict[str, Any]) -> Any:
    """A constant argument as plain JSON: the union's payload, or the union itself if unknown."""
    if len(arg) != 1:
        return arg
    kind, payload = next(iter(arg.items()))
    if kind == "as_none":
        return None
    if (
        kind in ("as_sym_int", "as_sym_float", "as_sym_bool")
        and isinstance(payload, dict)
        and len(payload) == 1
    ):
        return next(iter(payload.values()))
    return payload if kind in PLAIN_CONSTANTS else arg


def _modules_from_stack(stack: str | None, modules: dict[str, ModuleInfo], where: str) -> str | None:
    """Record each module of a node's nn_module_stack; return the deepest module's path."""
    if not stack:
        return None
    parent: str | None = None
    path = None
    for item in stack.split(ST_DELIMITER):
        parts = _split_stack_item(item)
        if parts is None:
            raise ArchiveFormatError(f"{where}: malformed nn_module_stack entry {_preview(item)}")
        _, path, kind = parts
        if path not in modules:
            modules[path] = ModuleInfo(path, kind, parent if path != parent else None)
        parent = path
    return path


def _split_stack_item(item: str) -> tuple[str, str, str] | None:
    """`key,path,type`, where path may hold commas inside brackets (torch's metadata_split)."""
    if "[" not in item and "(" not in item:
        fields = item.split(",")
        return (fields[0], fields[1], fields[2]) if len(fields) == 3 else None
    out: list[str] = []
    start = depth = 0
    for end, ch in enumerate(item):
        if ch in "[(":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(item[start:end])
            start = end + 1
    out.append(item[start:])
    return (out[0], out[1], out[2]) if len(out) == 3 else None


def _signature_input(spec: dict[str, Any], where: str) -> SignatureInput:
    kind, payload = _union(spec, f"{where}: signature input")
    if not isinstance(payload, dict):
        return SignatureInput(kind, None)
    arg = payload.get("arg")
    placeholder = None
    if isinstance(arg, dict):
        if isinstance(arg.get("name"), str):  # TensorArgument directly (parameter, buffer, ...)
            placeholder = arg["name"]
        else:
            refs = _tensor_refs(arg) if len(arg) == 1 else []
            placeholder = refs[0] if refs else _maybe_name(arg)
    target = _first_string(
        payload, ("parameter_name", "buffer_name", "tensor_constant_name", "custom_obj_name", "fqn")
    )
    persistent = payload.get("persistent") if isinstance(payload.get("persistent"), bool) else None
    return SignatureInput(kind, placeholder, target, persistent)


def _maybe_name(arg: dict[str, Any]) -> str | None:
    if len(arg) != 1:
        return None
    _, payload = next(iter(arg.items()))
    return _first_string(payload, ("name", "as_name")) if isinstance(payload, dict) else None


def _signature_output(spec: dict[str, Any], where: str) -> SignatureOutput:
    kind, payload = _union(spec, f"{where}: signature output")
    if not isinstance(payload, dict):
        return SignatureOutput(kind, None)
    arg = payload.get("arg")
    value = None
    if isinstance(arg, dict):
        value = arg["name"] if isinstance(arg.get("name"), str) else (_tensor_refs(arg) or [None])[0]
    target = _first_string(payload, ("buffer_name", "parameter_name", "user_input_name"))
    return SignatureOutput(kind, value, target)


def _first_string(payload: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    """The first of `keys` whose value is a string (schema versions name the target differently)."""
    return next((payload[key] for key in keys if isinstance(payload.get(key), str)), None)


# ---- tensors to nodes -------------------------------------------------------------------------


class Consumer(msgspec.Struct, frozen=True, gc=False):
    node: str
    target: str
    module: str | None
    via: str  # the FQN whose placeholder the node reads (the tensor itself, or a tied alias)


class TensorConsumers(msgspec.Struct, frozen=True, gc=False):
    name: str
    model: str
    placeholder: str | None
    aliases: tuple[str, ...]  # other names for exactly the same bytes (tied weights)
    consumers: tuple[Consumer, ...]


def alias_key(info: TensorInfo) -> tuple[object, ...] | None:
    """Names with equal keys are the same tensor: one payload entry, same view of it."""
    if info.storage is None or info.sizes is None:
        return None
    return (info.storage.entry, info.storage_offset, info.sizes, info.strides, info.dtype)


def consumers_of(graph: Graph, info: TensorInfo, tensors: Iterable[TensorInfo]) -> TensorConsumers:
    """The nodes reading a tensor, through its own placeholder or a tied alias's, in graph order."""
    key = alias_key(info)
    aliases = tuple(
        t.name for t in tensors if key is not None and t.name != info.name and alias_key(t) == key
    )
    placeholders = graph.placeholders_by_target()
    via_placeholder = {placeholders[n]: n for n in (info.name, *aliases) if n in placeholders}
    found = []
    for node in graph.nodes:
        for value in dict.fromkeys(v for arg in node.inputs for v in arg.tensors):
            if value in via_placeholder:
                found.append(Consumer(node.name, node.target, node.module, via_placeholder[value]))
    return TensorConsumers(info.name, graph.model, placeholders.get(info.name), aliases, tuple(found))
