"""Sibling GEMMs as one: linear layers that read the same activation with constant weights (the
q, k and v projections of attention) become one GEMM over the concatenated weights, each former
output a column slice (a view) of the wide result.

Why: one GEMM reads the activation once instead of once per projection and gives the kernel a
wider N to block over. The merge is taken only when every reader of each sibling's output is a
view (the head reshapes and transposes of q/k/v): a sibling whose output feeds an elementwise
op keeps its own GEMM, since that op fuses into it as an epilogue (the SwiGLU gate) and a
slice of a wider GEMM would lose that fusion.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from uol_core.graph.format import Graph, Node, TensorSpec
from uol_core.graph.merge import fresh_name

# library op -> (activation input, weight input [K, N], bias input [N] or None)
GEMMS = {"matmul": ("A", "B", None), "linear_bias": ("X", "W", "b")}


def _readers(graph: Graph) -> dict[str, list[Node]]:
    out: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for tensor in node.reads():
            out.setdefault(tensor, []).append(node)
    return out


def merge_sibling_gemms(graph: Graph) -> tuple[Graph, list[dict], dict[str, tuple[int, list[str]]]]:
    """A copy of `graph` with sibling GEMMs merged; one decision per sibling set considered;
    and the derived parameters: name -> (concatenation dim, the parameters it concatenates),
    so that a run given other values for those parameters rebuilds them."""
    readers = _readers(graph)
    sets: dict[tuple, list[Node]] = {}
    for node in graph.nodes:
        roles = GEMMS.get(node.source) if node.kind == "odl" else None
        if roles is None:
            continue
        act, weight, bias = roles
        if node.inputs[weight] not in graph.values or (bias and node.inputs[bias] not in graph.values):
            continue
        sets.setdefault((node.source, node.inputs[act]), []).append(node)
    nodes, params, values, shapes = list(graph.nodes), dict(graph.params), dict(graph.values), dict(graph.shapes)
    used = {n.name for n in nodes} | set(shapes) | set(params)
    decisions: list[dict] = []
    derived: dict[str, tuple[int, list[str]]] = {}
    for (source, activation), siblings in sets.items():
        if len(siblings) < 2:
            continue
        names = [n.name for n in siblings]
        decision = {"nodes": names, "input": activation, "merged": False}
        decisions.append(decision)
        outputs = [next(iter(n.outputs.values())) for n in siblings]
        fed = [r.name for t in outputs for r in readers.get(t, []) if r.kind != "torch" or r.label != "view"]
        if fed or any(t in graph.outputs for t in outputs):
            decision["reason"] = (f"{', '.join(dict.fromkeys(fed)) or 'a graph output'} reads a "
                                  "sibling's output directly: its GEMM keeps its epilogue fusion")
            continue
        _, weight, bias = GEMMS[source]
        widths = [values[n.inputs[weight]].shape[1] for n in siblings]
        w_name = fresh_name(f"{names[0]}_w_cat", used)
        values[w_name] = torch.cat([values[n.inputs[weight]] for n in siblings], dim=1).contiguous()
        params[w_name] = TensorSpec(tuple(values[w_name].shape), "f32")
        shapes[w_name] = params[w_name]
        derived[w_name] = (1, [n.inputs[weight] for n in siblings])
        inputs = {**siblings[0].inputs, weight: w_name}
        if bias:
            b_name = fresh_name(f"{names[0]}_b_cat", used)
            values[b_name] = torch.cat([values[n.inputs[bias]] for n in siblings]).contiguous()
            params[b_name] = shapes[b_name] = TensorSpec(tuple(values[b_name].shape), "f32")
            inputs[bias] = b_name
            derived[b_name] = (0, [n.inputs[bias] for n in siblings])
        wide = fresh_name(f"{names[0]}_cat", used)
        rows = shapes[outputs[0]].shape[0]
        shapes[wide] = TensorSpec((rows, sum(widths)), "f32")
        out_name = next(iter(siblings[0].outputs))
        merged = replace(siblings[0], name=fresh_name(f"{names[0]}_siblings", used),
                         inputs=inputs, outputs={out_name: wide})
        start = 0
        slices = {}
        for node, width, tensor in zip(siblings, widths, outputs):
            slices[node.name] = Node(node.name, "torch", source="aten.slice", outputs={"out": tensor},
                                     args=[{"tensor": wide}, 1, start, start + width],
                                     fn=torch.ops.aten.slice.Tensor, label="view")
            start += width
        first = nodes.index(siblings[0])
        nodes = [slices.get(n.name, n) for n in nodes]
        nodes.insert(first, merged)
        decision.update(merged=True, node=merged.name, reason=(
            f"one GEMM of N={sum(widths)} reads {activation} once instead of {len(siblings)} times; "
            f"the outputs are column slices ({', '.join(map(str, widths))})"))
    return replace(graph, nodes=nodes, params=params, values=values, shapes=shapes), decisions, derived


def param_value(graph: Graph, derived: dict[str, tuple[int, list[str]]], name: str,
                env: dict[str, torch.Tensor]) -> torch.Tensor:
    """A parameter of a rewritten graph: from `env`, else a derived one rebuilt from `env`'s parts
    when any part differs from the value it was built from, else the stored value."""
    if name in env:
        return env[name]
    dim, parts = derived.get(name, (0, []))
    if parts and any(p in env and env[p] is not graph.values.get(p) for p in parts):
        return torch.cat([env.get(p, graph.values.get(p)) for p in parts], dim)
    return graph.values[name]


__all__ = ["merge_sibling_gemms", "param_value"]
