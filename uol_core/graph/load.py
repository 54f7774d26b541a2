"""Load and validate operator graphs: names resolve, no cycles, shapes agree along every edge."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import torch

from uol_core.graph.factories import check_size, check_torch_call, is_factory
from uol_core.graph.format import (
    DTYPE_NAMES,
    TORCH_DTYPES,
    Graph,
    GraphError,
    Node,
    TensorSpec,
    graph_from_dict,
)
from uol_core.odl.shapes import ShapeError, bind_sizes, shape_of


def load_graph(path: str | Path) -> Graph:
    """Read a graph JSON file, validate it and infer every tensor's shape."""
    path = Path(path)
    if not path.is_file():
        raise GraphError(f"no graph file '{path}'")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise GraphError(f"cannot read {path}: {err}") from None
    except json.JSONDecodeError as err:
        raise GraphError(f"{path.name}:{err.lineno}:{err.colno}: invalid JSON: {err.msg}") from None
    return validate(graph_from_dict(data))


def producers(graph: Graph) -> dict[str, str]:
    """Tensor name -> the node that writes it; raises GraphError on a tensor written twice."""
    owner: dict[str, str] = {}
    sources = set(graph.inputs) | set(graph.params)
    seen_nodes: set[str] = set()
    for node in graph.nodes:
        if node.name in seen_nodes:
            raise GraphError(f"two nodes are called '{node.name}'")
        seen_nodes.add(node.name)
        for tensor in node.writes():
            if tensor in sources:
                raise GraphError(f"node {node.name} writes '{tensor}', which is a graph input/param")
            if tensor in owner:
                raise GraphError(f"tensor '{tensor}' is written by both {owner[tensor]} and {node.name}")
            owner[tensor] = node.name
    return owner


def to_networkx(graph: Graph) -> nx.DiGraph:
    """Nodes as networkx nodes (attribute `node`); an edge per tensor (attribute `tensors`)."""
    owner = producers(graph)
    known = set(owner) | set(graph.inputs) | set(graph.params)
    g = nx.DiGraph(name=graph.name)
    for node in graph.nodes:
        g.add_node(node.name, node=node)
    for node in graph.nodes:
        for tensor in node.reads():
            if tensor not in known:
                close = [t for t in sorted(known) if t.lower() == tensor.lower()]
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise GraphError(f"node {node.name} reads '{tensor}', which no node writes and is "
                                 f"not a graph input or param{hint}")
            if tensor in owner:
                src = owner[tensor]
                if g.has_edge(src, node.name):
                    g.edges[src, node.name]["tensors"].append(tensor)
                else:
                    g.add_edge(src, node.name, tensors=[tensor])
    return g


def topo_order(graph: Graph) -> list[Node]:
    """Nodes in an order where every producer runs before its consumers; GraphError on a cycle."""
    g = to_networkx(graph)
    try:
        order = list(nx.lexicographical_topological_sort(
            g, key=lambda n: [x.name for x in graph.nodes].index(n)))
    except nx.NetworkXUnfeasible:
        cycle = nx.find_cycle(g)
        path = " -> ".join([a for a, _ in cycle] + [cycle[0][0]])
        tensors = ", ".join(t for a, b in cycle for t in g.edges[a, b]["tensors"])
        raise GraphError(f"the graph has a cycle: {path} (through tensors {tensors})") from None
    return [g.nodes[n]["node"] for n in order]


def validate(graph: Graph) -> Graph:
    """Check names, cycles and shapes along every edge; fills graph.shapes and returns the graph."""
    order = topo_order(graph)
    owner = producers(graph)
    shapes: dict[str, TensorSpec | None] = {**graph.inputs, **graph.params}
    for node in order:
        if node.kind == "odl":
            _odl_shapes(node, shapes, owner)
        elif node.writes()[0] not in graph.shapes:
            check_torch_call(node)  # before any call: no setters, constructors capped
            shapes[node.writes()[0]] = _torch_shape(node, shapes)
        else:  # shapes recorded at import time (fx shape propagation)
            shapes[node.writes()[0]] = graph.shapes[node.writes()[0]]
    for out in graph.outputs:
        if out not in shapes:
            raise GraphError(f"graph output '{out}' is not written by any node nor an input")
    graph.shapes = shapes
    return graph


def _edge(tensor: str, node: Node, port: str, owner: dict[str, str]) -> str:
    src = owner.get(tensor)
    return f"edge '{tensor}' ({src} -> {node.name}.{port})" if src else f"'{tensor}' -> {node.name}.{port}"


def _odl_shapes(node: Node, shapes: dict, owner: dict[str, str]) -> None:
    op = node.op
    given: dict[str, tuple[int, ...]] = {}
    for decl in op.inputs:
        tensor = node.inputs[decl.name]
        spec = shapes[tensor]
        if spec is None:
            raise GraphError(f"{_edge(tensor, node, decl.name, owner)}: not a tensor")
        if spec.dtype != decl.dtype.value:
            raise GraphError(f"dtype mismatch on {_edge(tensor, node, decl.name, owner)}: "
                             f"{spec.dtype} but {op.name} declares {decl.name}: {decl.dtype.value}")
        want = node.declared.get(decl.name)
        if want is not None and want != spec.shape:
            raise GraphError(f"shape mismatch on {_edge(tensor, node, decl.name, owner)}: it carries "
                             f"{list(spec.shape)} but the node declares {list(want)}")
        given[decl.name] = spec.shape
    try:
        sizes = bind_sizes(op, given)
    except ShapeError as err:
        carried = ", ".join(f"{_edge(node.inputs[k], node, k, owner)} {list(v)}" for k, v in given.items())
        raise GraphError(f"shape mismatch at node {node.name} ({op.name}): {err} [inputs: {carried}]") from None
    for decl in op.outputs:
        shapes[node.outputs[decl.name]] = TensorSpec(shape_of(op, decl.name, sizes), decl.dtype.value)


def _torch_shape(node: Node, shapes: dict) -> TensorSpec | None:
    """Run a torch node on meta tensors (a constructor on the meta device): its output shape
    with no data and no compute."""
    def meta(value):
        if isinstance(value, dict) and set(value) == {"tensor"}:
            spec = shapes[value["tensor"]]
            if spec is None:
                raise GraphError(f"node {node.name}: '{value['tensor']}' has no known shape")
            return torch.empty(spec.shape, dtype=TORCH_DTYPES[spec.dtype], device="meta")
        if isinstance(value, list):
            return [meta(v) for v in value]
        if isinstance(value, dict):
            return {k: meta(v) for k, v in value.items()}
        return value

    kwargs = meta(node.kwargs)
    if is_factory(node):  # a constructor: its shape on the meta device, never its data here
        kwargs["device"] = "meta"
    try:
        out = node.fn(*meta(node.args), **kwargs)
    except Exception as err:  # any torch error is the user's arguments: say which node
        raise GraphError(f"node {node.name} ({node.source}) fails on its input shapes: {err}") from None
    if isinstance(out, torch.Tensor):
        if is_factory(node):
            check_size(node, out.numel())
        return TensorSpec(tuple(out.shape), DTYPE_NAMES.get(out.dtype, "f32"))
    return None
