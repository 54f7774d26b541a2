"""Operator-graph data model and its JSON form: nodes (library/inline ODL or torch), tensors as edges.

A graph names its tensors; an edge is a tensor one node writes and another reads. JSON:

    {"name": "mlp", "inputs": {"x": {"shape": [64, 256]}}, "params": {"W1": {"shape": [256, 512]}},
     "nodes": [{"name": "fc1", "op": "linear_bias", "inputs": {"X": "x", "W": "W1", "b": "b1"},
                "outputs": {"Y": "h"}},
               {"name": "act", "odl": "op ...", "inputs": {...}, "outputs": {...}},
               {"name": "v", "torch": "method:reshape", "args": [{"tensor": "h"}, [64, 8, 64]],
                "outputs": {"out": "h3"}}],
     "outputs": ["y"]}
"""

from __future__ import annotations

import difflib
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from uol_core.odl import OdlError, parse
from uol_core.odl.ir import DType, Op
from uol_core.odl.printer import format_op
from uol_core.ops import list_ops, load_op


class GraphError(ValueError):
    """A graph the user must fix: names the node, the tensor (edge) and what was expected."""


@dataclass(frozen=True)
class TensorSpec:
    """Concrete shape and element type of a graph tensor."""

    shape: tuple[int, ...]
    dtype: str = "f32"

    def to_dict(self) -> dict:
        return {"shape": list(self.shape), "dtype": self.dtype}


@dataclass
class Node:
    """One node: an ODL op bound to graph tensors, or a torch call (opaque, runs in torch)."""

    name: str
    kind: str  # "odl" or "torch"
    op: Op | None = None
    source: str = ""  # library name, "inline", or the torch target ("method:view", "torch.cat")
    inputs: dict[str, str] = field(default_factory=dict)  # odl: op input -> graph tensor
    outputs: dict[str, str] = field(default_factory=dict)  # op output (torch: "out") -> tensor
    args: list = field(default_factory=list)  # torch: positional args; {"tensor": t} for tensors
    kwargs: dict = field(default_factory=dict)
    fn: Callable | None = None  # torch: the callable (resolved from `source` or kept from fx)
    label: str = ""  # torch: why the node runs in torch ("view", "opaque: not in the library")
    declared: dict[str, tuple[int, ...]] = field(default_factory=dict)  # optional input shapes

    def reads(self) -> list[str]:
        """Graph tensors this node reads, in order, without repeats."""
        if self.kind == "odl":
            return list(dict.fromkeys(self.inputs.values()))
        return list(dict.fromkeys(tensor_refs([self.args, self.kwargs])))

    def writes(self) -> list[str]:
        """Graph tensors this node writes."""
        return list(self.outputs.values())


@dataclass
class Graph:
    """An operator graph: inputs, parameters, nodes in any order, outputs; shapes after validation."""

    name: str
    inputs: dict[str, TensorSpec]
    params: dict[str, TensorSpec]
    nodes: list[Node]
    outputs: list[str]
    description: str = ""
    values: dict[str, torch.Tensor] = field(default_factory=dict)  # known parameter values
    shapes: dict[str, TensorSpec | None] = field(default_factory=dict)  # None: not a tensor
    module: Any = None  # the torch module an imported graph came from (the reference)
    program: Any = None  # the exported program it was imported from (torch.export), if any
    origins: dict[str, str] = field(default_factory=dict)  # graph tensor -> program node it holds

    def node(self, name: str) -> Node:
        """The node called `name`."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node '{name}' in graph {self.name}")


TORCH_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
                "f64": torch.float64, "i64": torch.int64, "i32": torch.int32, "i8": torch.int8,
                "bool": torch.bool}
DTYPE_NAMES = {v: k for k, v in TORCH_DTYPES.items()}


def tensor_refs(value: Any) -> list[str]:
    """Names of the `{"tensor": name}` references inside nested args."""
    if isinstance(value, dict):
        if set(value) == {"tensor"}:
            return [value["tensor"]]
        return [name for item in value.values() for name in tensor_refs(item)]
    if isinstance(value, (list, tuple)):
        return [name for item in value for name in tensor_refs(item)]
    return []


# ---------------------------------------------------------------- torch targets a JSON may name

# Only pure tensor math is reachable from a JSON file: no I/O, no global state, no in-place writes.
OPERATORS = ("add", "sub", "mul", "truediv", "neg", "pow", "matmul", "getitem")
DENIED = {"from_file", "load", "save", "set_default_dtype", "set_default_device", "manual_seed",
          "seed", "set_num_threads", "set_printoptions", "set_grad_enabled", "use_deterministic_algorithms"}


def resolve_torch(target: str) -> Callable:
    """The callable a JSON torch node names: `method:NAME`, `torch.NAME`, `torch.nn.functional.NAME`
    or `operator.NAME`; raises GraphError for anything else (a JSON file must not run arbitrary code)."""
    if target.startswith("method:"):
        name = target.split(":", 1)[1]
        if name.startswith("_") or name.endswith("_") or not hasattr(torch.Tensor, name) or name in DENIED:
            raise GraphError(f"'{target}' is not an allowed tensor method")
        return lambda self, *a, **k: getattr(self, name)(*a, **k)
    if target.startswith("module:"):
        raise GraphError(f"'{target}' is an nn.Module call, which a JSON file cannot rebuild; run the "
                         "import from the module instead (`uol graph run module:Class`)")
    head, _, name = target.rpartition(".")
    if head == "operator" and name in OPERATORS:
        return getattr(operator, name)
    namespaces = {"torch": torch, "torch.nn.functional": torch.nn.functional}
    space = namespaces.get(head)
    fn = getattr(space, name, None) if space is not None and not name.startswith("_") else None
    if fn is None or name in DENIED or not callable(fn) or isinstance(fn, type):
        raise GraphError(f"unknown or disallowed torch target '{target}' (use method:NAME, "
                         "torch.NAME, torch.nn.functional.NAME or operator.NAME)")
    return fn


# ---------------------------------------------------------------- JSON -> Graph


def _spec(where: str, data: Any) -> TensorSpec:
    if not isinstance(data, dict) or "shape" not in data:
        raise GraphError(f"{where}: expected {{\"shape\": [...], \"dtype\": \"f32\"}}, got {data!r}")
    shape = data["shape"]
    if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 1 for s in shape):
        raise GraphError(f"{where}: shape must be a list of positive integers, got {shape!r}")
    dtype = data.get("dtype", "f32")
    if dtype not in TORCH_DTYPES:
        raise GraphError(f"{where}: unknown dtype '{dtype}' (known: {', '.join(TORCH_DTYPES)})")
    return TensorSpec(tuple(shape), dtype)


def _library_op(node: str, name: str) -> Op:
    if name not in list_ops():
        close = difflib.get_close_matches(name, list_ops(), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else " (see `uol ops list`)"
        raise GraphError(f"node {node}: unknown operator '{name}'{hint}")
    return load_op(name)


def _names(where: str, mapping: dict) -> dict[str, str]:
    """A name -> tensor-name mapping whose keys and values are all non-empty strings."""
    bad = [(k, v) for k, v in mapping.items()
           if not (isinstance(k, str) and k and isinstance(v, str) and v)]
    if bad:
        raise GraphError(f"{where}: names must be non-empty strings, got {bad[0][0]!r}: {bad[0][1]!r}")
    return dict(mapping)


def _node(index: int, data: Any) -> Node:
    if not isinstance(data, dict):
        raise GraphError(f"nodes[{index}]: expected an object, got {data!r}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise GraphError(f"nodes[{index}]: every node needs a \"name\"")
    kinds = [k for k in ("op", "odl", "torch") if k in data]
    if len(kinds) != 1:
        raise GraphError(f"node {name}: give exactly one of \"op\" (library name), \"odl\" (inline "
                         "ODL text) or \"torch\" (a torch call)")
    outputs = data.get("outputs", {})
    if not isinstance(outputs, dict) or not outputs:
        raise GraphError(f"node {name}: \"outputs\" must map op outputs to tensor names")
    outputs = _names(f"node {name} outputs", outputs)
    if kinds[0] == "torch":
        target = str(data["torch"])
        if list(outputs) != ["out"]:
            raise GraphError(f"node {name}: a torch node has one output, written {{\"out\": tensor}}")
        args, kwargs = data.get("args", []), data.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise GraphError(f"node {name}: \"args\" must be a list and \"kwargs\" an object")
        refs = tensor_refs([args, kwargs])
        if not all(isinstance(t, str) and t for t in refs):
            raise GraphError(f"node {name}: every {{\"tensor\": name}} needs a string name")
        return Node(name, "torch", source=target, outputs=dict(outputs),
                    args=list(args), kwargs=dict(kwargs),
                    fn=resolve_torch(target), label=data.get("label", "torch"))
    if kinds[0] == "op":
        op, source = _library_op(name, str(data["op"])), str(data["op"])
    else:
        try:
            op, source = parse(str(data["odl"]), filename=f"{name}.odl"), "inline"
        except OdlError as err:
            raise GraphError(f"node {name}: inline ODL: {err.render()}") from None
    inputs = data.get("inputs", {})
    if not isinstance(inputs, dict):
        raise GraphError(f"node {name}: \"inputs\" must map op inputs to tensor names")
    inputs = _names(f"node {name} inputs", inputs)
    want_in, want_out = [d.name for d in op.inputs], [d.name for d in op.outputs]
    if sorted(inputs) != sorted(want_in):
        raise GraphError(f"node {name}: {op.name} takes inputs {want_in}, the node binds {sorted(inputs)}")
    if sorted(outputs) != sorted(want_out):
        raise GraphError(f"node {name}: {op.name} has outputs {want_out}, the node binds {sorted(outputs)}")
    declared = {k: tuple(_spec(f"node {name} shapes.{k}", {"shape": v}).shape)
                for k, v in data.get("shapes", {}).items()}
    return Node(name, "odl", op=op, source=source, inputs=dict(inputs), outputs=dict(outputs),
                declared=declared)


def graph_from_dict(data: Any) -> Graph:
    """Build a Graph from parsed JSON; structural errors raise GraphError (see load.validate for shapes)."""
    if not isinstance(data, dict):
        raise GraphError("a graph file holds one JSON object with \"nodes\" and \"outputs\"")
    unknown = set(data) - {"name", "description", "inputs", "params", "nodes", "outputs"}
    if unknown:
        raise GraphError(f"unknown top-level key(s) {sorted(unknown)}")
    for key in ("inputs", "params"):  # a list or a number here must be a GraphError, not a crash
        if not isinstance(data.get(key, {}), dict):
            raise GraphError(f'"{key}" must be an object: name -> {{"shape": [...]}}')
    inputs = {k: _spec(f"inputs.{k}", v) for k, v in data.get("inputs", {}).items()}
    params = {k: _spec(f"params.{k}", v) for k, v in data.get("params", {}).items()}
    if not isinstance(data.get("nodes"), list) or not data["nodes"]:
        raise GraphError("\"nodes\" must be a non-empty list")
    nodes = [_node(i, n) for i, n in enumerate(data["nodes"])]
    outputs = data.get("outputs")
    if not isinstance(outputs, list) or not outputs:
        raise GraphError("\"outputs\" must list the graph's result tensors")
    return Graph(str(data.get("name", "graph")), inputs, params, nodes, [str(o) for o in outputs],
                 str(data.get("description", "")))


def _jsonable(value: Any) -> Any:
    """Arguments as JSON values: a torch dtype, device or layout becomes its name."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def graph_to_dict(graph: Graph) -> dict:
    """The JSON form of a graph (parameter values are not stored; only their shapes)."""
    nodes = []
    for node in graph.nodes:
        if node.kind == "torch":
            nodes.append({"name": node.name, "torch": node.source, "args": _jsonable(node.args),
                          "kwargs": _jsonable(node.kwargs), "outputs": node.outputs,
                          "label": node.label})
            continue
        entry: dict = {"name": node.name}
        if node.source == "inline":
            entry["odl"] = format_op(node.op)
        else:
            entry["op"] = node.source
        entry.update(inputs=node.inputs, outputs=node.outputs)
        nodes.append(entry)
    return {"name": graph.name, "description": graph.description,
            "inputs": {k: v.to_dict() for k, v in graph.inputs.items()},
            "params": {k: v.to_dict() for k, v in graph.params.items()},
            "nodes": nodes, "outputs": graph.outputs}


def odl_dtype(name: str) -> DType:
    """The ODL element type of a graph dtype name."""
    return DType(name)
