"""Fold views into the ODL ops that read them: a chain of torch views (reshape that splits dims,
transpose, permute, slice, select, unsqueeze, expand, getitem of a split) between a tensor and
an ODL node is an affine index map, so the node can read the underlying tensor directly.

Why: a kernel that needs a contiguous input would otherwise get a copy of every transposed view
(the q/k/v head transposes in front of attention), and a view between two ODL nodes hides the
producer from the fusion planner (an elementwise op behind a reshape never fuses). After
folding, the copy is gone and the nodes are adjacent, so the planner can fuse them.

The map comes from the view's strides: each view dimension of stride s steps one dimension m of
the contiguous base by s / stride_m, and the fold is taken only when no index can carry into the
next base dimension (so the affine form is exact). A fold that would cost the node its backend
template (the op would fall to generic loop nests) is refused, with the reason.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from uol_core.graph.format import Graph, Node
from uol_core.graph.merge import Member, merge
from uol_core.graph.route import REFERENCE, can_emit, generator
from uol_core.odl import parse
from uol_core.odl.ir import Access, Affine, Binary, Call, Cast, Expr, Op, Reduce, Scan, Unary
from uol_core.odl.printer import format_op
from uol_core.odl.shapes import bind_sizes

# views that only copy (or alias) their input: for the index map they are the identity
IDENTITIES = ("contiguous", "clone", "alias", "detach", "lift_fresh_copy")
IndexMap = tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]  # coeffs[m][k], offsets[m]


def view_chain(graph: Graph, tensor: str, made_by: dict[str, str]) -> tuple[str, list[Node]] | None:
    """The tensor under a chain of view nodes ending in `tensor`, and the chain (first to last);
    None when `tensor` is not a view or a node in the chain reads more than one tensor."""
    chain: list[Node] = []
    while tensor in made_by:
        node = graph.node(made_by[tensor])
        if node.kind != "torch" or node.label != "view" or len(node.reads()) != 1:
            break
        chain.insert(0, node)
        tensor = node.reads()[0]
    return (tensor, chain) if chain else None


def _resolve(value, env):
    if isinstance(value, dict) and set(value) == {"tensor"}:
        return env[value["tensor"]]
    if isinstance(value, (list, tuple)):
        return type(value)(_resolve(v, env) for v in value)
    if isinstance(value, dict):
        return {k: _resolve(v, env) for k, v in value.items()}
    return value


def index_map(graph: Graph, base: str, chain: list[Node]) -> IndexMap | None:
    """coeffs and offsets with base[m] = sum_k coeffs[m][k] * view[k] + offsets[m], or None
    when the chain copies (a reshape that merges non-contiguous dims) or an index would carry."""
    shape = graph.shapes[base].shape
    start = torch.empty(shape)  # never written: only its strides and addresses are looked at
    env = {base: start}
    with torch.no_grad():
        for node in chain:
            args = _resolve(node.args, env)
            if node.source.rsplit(".", 1)[-1] in IDENTITIES:  # same values: keep the layout
                env[node.writes()[0]] = args[0]
                continue
            env[node.writes()[0]] = node.fn(*args, **_resolve(node.kwargs, env))
    view = env[chain[-1].writes()[0]]
    if not isinstance(view, torch.Tensor) or \
            view.untyped_storage().data_ptr() != start.untyped_storage().data_ptr():
        return None
    strides = start.stride()
    coeffs = [[0] * view.dim() for _ in shape]
    offsets = [(view.storage_offset() // strides[m]) % shape[m] for m in range(len(shape))]
    for k, (size, step) in enumerate(zip(view.shape, view.stride())):
        if size == 1 or step == 0:
            continue
        dims = [m for m in range(len(shape)) if step % strides[m] == 0 and shape[m] > 1]
        if not dims:
            return None
        m = min(dims, key=lambda d: step // strides[d])  # the coarsest dimension it steps
        coeffs[m][k] = step // strides[m]
    for m in range(len(shape)):
        reach = offsets[m] + sum(c * (s - 1) for c, s in zip(coeffs[m], view.shape))
        if reach >= shape[m]:
            return None
    return tuple(tuple(row) for row in coeffs), tuple(offsets)


def _map_expr(e: Expr, tensor: str, imap: IndexMap) -> Expr:
    coeffs, offsets = imap
    if isinstance(e, Access):
        if e.tensor != tensor:
            return e
        indices = []
        for row, off in zip(coeffs, offsets):
            form = Affine.constant(off)
            for c, index in zip(row, e.indices):
                if c:
                    form = form + index.scale(c)
            indices.append(form)
        return replace(e, indices=tuple(indices))
    if isinstance(e, (Unary, Cast)):
        return replace(e, operand=_map_expr(e.operand, tensor, imap))
    if isinstance(e, Binary):
        return replace(e, lhs=_map_expr(e.lhs, tensor, imap), rhs=_map_expr(e.rhs, tensor, imap))
    if isinstance(e, Call):
        return replace(e, args=tuple(_map_expr(a, tensor, imap) for a in e.args))
    if isinstance(e, (Reduce, Scan)):
        return replace(e, body=_map_expr(e.body, tensor, imap))
    return e


def _padded(e: Expr, tensor: str) -> bool:
    if isinstance(e, Access):
        return e.tensor == tensor and e.pad is not None
    children = {Unary: ("operand",), Cast: ("operand",), Binary: ("lhs", "rhs"), Reduce: ("body",),
                Scan: ("body",)}.get(type(e), ())
    if isinstance(e, Call):
        return any(_padded(a, tensor) for a in e.args)
    return any(_padded(getattr(e, c), tensor) for c in children)


def fold_into(graph: Graph, node: Node, view: str, base: str, imap: IndexMap) -> Node:
    """`node` rewritten to read `base` through `imap` where it read `view`."""
    keep = set(node.outputs.values())
    fused = merge(node.name, [Member(node.name, node.op, node.inputs, node.outputs)], graph.shapes,
                  keep, constants=True)
    local = next(k for k, v in fused.inputs.items() if v == view)
    if any(_padded(s.expr, local) for s in fused.op.stmts):
        raise ValueError("the op reads the view with padding (out-of-bounds reads)")
    decls = tuple(replace(d, shape=tuple(Affine.constant(v) for v in graph.shapes[base].shape))
                  if d.name == local else d for d in fused.op.inputs)
    stmts = tuple(replace(s, expr=_map_expr(s.expr, local, imap)) for s in fused.op.stmts)
    op = Op(node.op.name, decls, fused.op.outputs, stmts)
    checked = parse(format_op(op), filename=f"{node.op.name}.odl")
    inputs = {k: (base if k == local else v) for k, v in fused.inputs.items()}
    return replace(node, op=checked, source="inline", inputs=inputs, outputs=dict(fused.outputs))


def _sizes(graph: Graph, node: Node) -> dict[str, int]:
    return bind_sizes(node.op, {k: graph.shapes[v].shape for k, v in node.inputs.items()})


def fold_views(graph: Graph, backend: str = "c", target="host") -> tuple[Graph, list[dict]]:
    """A copy of `graph` with every foldable view read by an ODL node folded into the node,
    dead view nodes dropped; plus one decision (taken or refused, with the reason) per view."""
    nodes = list(graph.nodes)
    made_by = {t: n.name for n in nodes for t in n.writes()}
    decisions: list[dict] = []
    current = replace(graph, nodes=nodes)
    for i, node in enumerate(nodes):
        if node.kind != "odl":
            continue
        for view in list(dict.fromkeys(node.inputs.values())):
            found = view_chain(current, view, made_by)
            if found is None or current.shapes.get(found[0]) is None:  # an item of a tuple result
                continue
            base, chain = found
            decision = {"consumer": node.name, "view": view, "base": base,
                        "chain": [c.source for c in chain], "folded": False}
            decisions.append(decision)
            imap = index_map(current, base, chain)
            if imap is None:
                decision["reason"] = ("the view is not an affine index map of its base (it copies, or merges "
                                      "dimensions so that an index would carry into the next)")
                continue
            try:
                folded = fold_into(current, node, view, base, imap)
            except Exception as err:  # the rewritten op does not check: keep the view
                decision["reason"] = f"the folded op is not valid ODL: {str(err).splitlines()[0]}"
                continue
            why = _refusal(current, node, folded, backend, target)
            if why:
                decision["reason"] = why
                continue
            decision.update(folded=True, reason=f"reads {base} directly through "
                            f"{' -> '.join(decision['chain'])} as an affine index map")
            nodes[i] = node = folded
    return _drop_dead_views(replace(graph, nodes=nodes)), decisions


def _refusal(graph: Graph, old: Node, new: Node, backend: str, target) -> str:
    if backend == REFERENCE:
        return ""
    old_sizes, new_sizes = _sizes(graph, old), _sizes(graph, new)
    old_ok, _ = can_emit(old.op, old_sizes, backend, target)
    new_ok, why = can_emit(new.op, new_sizes, backend, target)
    if old_ok and not new_ok:
        return f"{backend} cannot emit the folded op ({why})"
    before, after = generator(old.op, old_sizes, backend, target), generator(new.op, new_sizes, backend, target)
    if before and "generic" not in before and "generic" in after:
        return (f"{backend} would emit the folded op only as generic loop nests; {old.name} would "
                f"lose its {backend} kernel ({before})")
    return ""


def _drop_dead_views(graph: Graph) -> Graph:
    nodes = list(graph.nodes)
    while True:
        read = {t for n in nodes for t in n.reads()} | set(graph.outputs)
        alive = [n for n in nodes if not (n.kind == "torch" and n.label == "view"
                                          and not set(n.writes()) & read)]
        if len(alive) == len(nodes):
            return replace(graph, nodes=alive)
        nodes = alive


__all__ = ["fold_views", "index_map", "view_chain"]
