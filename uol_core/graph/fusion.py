"""Fusion planner: merge producer/consumer nodes into one ODL op when it saves memory traffic and
the backend can emit the result; every decision (taken or refused) is recorded with its reason.

Candidates, in topological order: a map after anything (epilogue, map chain), a map into a
reduction (residual + norm), contraction -> softmax -> contraction (attention pieces), a map in
front of a contraction (prologue). Back-to-back contractions are never merged: one would be
recomputed. A fusion is taken when (1) the merged op is valid ODL, (2) op_cost says it moves
fewer bytes, and (3) the backend emits it, or neither side had a backend kernel anyway (the
group then runs in the reference evaluator until the backend learns the pattern).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from uol_core.graph.format import Graph, Node
from uol_core.graph.inplace import may_write
from uol_core.graph.load import producers, topo_order
from uol_core.graph.merge import Member, merge
from uol_core.graph.route import can_emit, generator
from uol_core.odl.cost import op_cost
from uol_core.odl.ir import Op, Reduce, walk
from uol_core.odl.patterns import classify
from uol_core.odl.shapes import bind_sizes


@dataclass
class Group:
    """Nodes that run as one kernel (or one torch call): the op and its graph-tensor binding."""

    name: str
    nodes: list[str]
    kind: str  # "odl" or "torch"
    op: Op | None = None
    inputs: dict[str, str] = field(default_factory=dict)  # op input -> graph tensor
    outputs: dict[str, str] = field(default_factory=dict)  # op output -> graph tensor
    pattern: str = ""

    def sizes(self, graph: Graph) -> dict[str, int]:
        """Dimension sizes of the group's op at the graph's shapes."""
        return bind_sizes(self.op, {k: graph.shapes[v].shape for k, v in self.inputs.items()})


@dataclass(frozen=True)
class Decision:
    """One fusion considered: which group and node, over which tensor, taken or not and why."""

    producer: str
    consumer: str
    tensors: tuple[str, ...]
    kind: str
    fused: bool
    bytes_saved: int
    reason: str

    def to_dict(self) -> dict:
        return dict(self.__dict__, tensors=list(self.tensors))


@dataclass
class FusionPlan:
    """Groups in run order and every fusion decision."""

    graph: Graph
    backend: str
    target: str
    groups: list[Group]
    decisions: list[Decision]
    view_folds: list[dict] = field(default_factory=list)  # view_fold.fold_views decisions
    siblings: list[dict] = field(default_factory=list)  # siblings.merge_sibling_gemms decisions
    derived: dict[str, tuple[int, list[str]]] = field(default_factory=dict)  # concatenated params

    def to_dict(self) -> dict:
        return {"backend": self.backend, "target": self.target, "view_folds": self.view_folds,
                "sibling_gemms": self.siblings,
                "groups": [{"name": g.name, "nodes": g.nodes, "kind": g.kind, "pattern": g.pattern,
                            "op": g.op.name if g.op else None} for g in self.groups],
                "decisions": [d.to_dict() for d in self.decisions]}


def single(node: Node) -> Group:
    """The group of one unfused node."""
    if node.kind == "torch":
        return Group(node.name, [node.name], "torch", pattern=node.label or "torch")
    return Group(node.name, [node.name], "odl", node.op, dict(node.inputs), dict(node.outputs),
                 classify(node.op).kind)


def fusion_kind(producer: Op, consumer: Op, tensors: set[str], p_bind: dict[str, str]) -> tuple[str, str]:
    """(label, refusal) for merging `consumer` after `producer`; refusal is '' when allowed."""
    pattern = classify(producer)
    pk, ck = pattern.kind, classify(consumer).kind
    names = {v: k for k, v in p_bind.items()}
    writer = {s.target: i for i, s in enumerate(producer.stmts)}
    shared = [writer[names[t]] for t in tensors]
    shared_kinds = {pattern.statements[i].kind for i in shared}
    upstream_contraction = any(s.kind == "contraction" and s.index <= max(shared)
                               for s in pattern.statements)
    softmax = any(isinstance(n, Reduce) and n.op == "max" for s in producer.stmts for n in walk(s.expr))
    if ck == "map":
        return {"contraction": "epilogue", "map": "map chain"}.get(pk, f"epilogue of a {pk}"), ""
    if ck == "contraction":
        if upstream_contraction and softmax:
            return "attention (softmax -> PV)", ""
        if upstream_contraction:
            return "contraction -> contraction", ("back-to-back contractions: fusing would recompute "
                                                  "the first for every column of the second")
        return f"prologue ({pk} into a contraction)", ""
    if pk == "map":
        return f"residual + {ck} (e.g. add + norm)", ""
    if "contraction" in shared_kinds and ck == "reduce":
        return "contraction -> reduce (scores -> softmax, linear -> norm)", ""
    return f"{pk} -> {ck}", ""


def plan_fusion(graph: Graph, backend: str = "c", target: str = "host", fuse: bool = True) -> FusionPlan:
    """Group the graph's nodes for `backend` on `target`; `fuse=False` keeps one group per node."""
    order = topo_order(graph)
    owner_node = producers(graph)
    readers: dict[str, set[str]] = {}
    for node in graph.nodes:
        for tensor in node.reads():
            readers.setdefault(tensor, set()).add(node.name)
    groups: dict[str, Group] = {}
    group_of: dict[str, str] = {}
    decisions: list[Decision] = []
    position = {node.name: i for i, node in enumerate(order)}
    # torch nodes that write into a tensor in place: a group spanning one would run members
    # written before it after it (or the reverse), so none does
    writes = {position[n.name]: n.name for n in order if may_write(n)}
    for node in order:
        group = single(node)
        if fuse and node.kind == "odl":
            joined = _try_join(graph, node, group, groups, group_of, owner_node, readers,
                               backend, target, decisions, (position, writes))
            if joined is not None:
                group_of[node.name] = joined
                continue
        groups[group.name] = group
        group_of[node.name] = group.name
    return FusionPlan(graph, backend, target, _run_order(graph, groups, group_of, owner_node),
                      decisions)


def _run_order(graph, groups: dict[str, Group], group_of, owner_node) -> list[Group]:
    """Groups sorted so that each runs after the groups it reads from (a node that joined an
    earlier producer may also read a tensor written later than that producer)."""
    g = nx.DiGraph()
    position = {name: i for i, name in enumerate(groups)}
    g.add_nodes_from(groups)
    for name, group in groups.items():
        for member in group.nodes:
            for tensor in graph.node(member).reads():
                src = owner_node.get(tensor)
                if src is not None and group_of[src] != name:
                    g.add_edge(group_of[src], name)
    order = nx.lexicographical_topological_sort(g, key=lambda n: position[n])
    return [groups[n] for n in order]


def _try_join(graph, node, group, groups, group_of, owner_node, readers, backend, target,
              decisions, barriers=({}, {})) -> str | None:
    """Merge `node` into the first producer group that accepts it; returns that group's name.
    `barriers` (node positions, positions of in-place writers) forbids spanning a writer."""
    position, writes = barriers
    by_group: dict[str, list[str]] = {}
    for tensor in node.reads():
        src = owner_node.get(tensor)
        if src is not None and groups.get(group_of[src], None) is not None:
            by_group.setdefault(group_of[src], []).append(tensor)
    for pname, tensors in by_group.items():
        producer = groups[pname]
        if producer.kind != "odl":
            continue
        first = min(position.get(m, 0) for m in producer.nodes)
        writer = next((w for w in writes if first < w < position.get(node.name, 0)), None)
        if writer is not None:
            decisions.append(Decision(producer.name, node.name, tuple(tensors), "across a write", False,
                                      0, f"{writes[writer]} between them writes a tensor in place: "
                                      "fused, one of them would run on the wrong side of the write"))
            continue
        decision, fused = _consider(graph, producer, group, tensors, groups, group_of,
                                    owner_node, readers, backend, target)
        decisions.append(decision)
        if fused is not None:
            groups[pname] = fused
            return pname
    return None


def _depends_on(graph, start: str, target_group: str, group_of, owner_node, skip: set[str]) -> bool:
    """True when node `start` (outside the group) transitively reads from `target_group`."""
    stack, seen = [start], set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for tensor in graph.node(name).reads():
            src = owner_node.get(tensor)
            if src is None or src in skip:
                continue
            if group_of.get(src) == target_group:
                return True
            stack.append(src)
    return False


def _consider(graph, producer: Group, group: Group, tensors, groups, group_of, owner_node,
              readers, backend, target) -> tuple[Decision, Group | None]:
    """Decide one candidate; returns the decision and the merged group when taken."""
    node = graph.node(group.name)
    label, refusal = fusion_kind(producer.op, node.op, set(tensors), producer.outputs)

    def refuse(reason: str, saved: int = 0) -> tuple[Decision, None]:
        return Decision(producer.name, node.name, tuple(tensors), label, False, saved, reason), None

    if refusal:
        return refuse(refusal)
    # A cycle would appear if another input of the node comes from the producer via outside nodes.
    for tensor in node.reads():
        src = owner_node.get(tensor)
        if src is not None and group_of.get(src) != producer.name and _depends_on(
                graph, src, producer.name, group_of, owner_node, set()):
            return refuse(f"'{tensor}' reaches {node.name} from {producer.name} through {src}; "
                          "merging would create a cycle")
    members = [Member(n, graph.node(n).op, graph.node(n).inputs, graph.node(n).outputs)
               for n in [*producer.nodes, node.name]]
    inside = set(producer.nodes) | {node.name}
    keep = {t for m in members for t in m.outputs.values()
            if t in graph.outputs or readers.get(t, set()) - inside}
    try:
        fused = merge(f"{producer.name}_{node.name}", members, graph.shapes, keep)
    except Exception as err:  # the merged text did not check: refuse, quoting the checker
        return refuse(f"the merged op is not valid ODL: {str(err).splitlines()[0]}")
    merged = Group(producer.name, [*producer.nodes, node.name], "odl", fused.op, fused.inputs,
                   fused.outputs, classify(fused.op).kind)
    before = (op_cost(producer.op, producer.sizes(graph)).bytes
              + op_cost(node.op, group.sizes(graph)).bytes)
    after = op_cost(fused.op, merged.sizes(graph)).bytes
    saved = before - after
    if saved <= 0:
        return refuse(f"saves no memory traffic ({before} -> {after} bytes)", saved)
    ok, why = can_emit(fused.op, merged.sizes(graph), backend, target)
    lost_template = _lost_template(producer, node.op, group, fused.op, merged, graph, backend,
                                   target) if ok else None
    if lost_template:
        return refuse(lost_template, saved)
    if ok:
        reason = f"saves {saved:,} bytes; {backend} emits the fused {merged.pattern}"
        return Decision(producer.name, node.name, tuple(tensors), label, True, saved, reason), merged
    p_ok, _ = can_emit(producer.op, producer.sizes(graph), backend, target)
    c_ok, _ = can_emit(node.op, group.sizes(graph), backend, target)
    if p_ok or c_ok:
        lost = producer.name if p_ok else node.name
        return refuse(f"{backend} cannot emit the fused op ({why}); {lost} would lose its "
                      f"{backend} kernel", saved)
    reason = (f"saves {saved:,} bytes; no {backend} kernel for either side yet ({why}), "
              "so the group runs in the reference evaluator")
    return Decision(producer.name, node.name, tuple(tensors), label, True, saved, reason), merged


def _lost_template(producer, consumer_op, consumer, fused_op, merged, graph, backend,
                   target) -> str | None:
    """A merge the backend can only emit as generic loop nests, while a side had a template
    (the GEMM): refuse it, because the template is worth more than the traffic saved."""
    fused_gen = generator(fused_op, merged.sizes(graph), backend, target)
    if "generic" not in fused_gen:
        return None
    for name, op, sizes in ((producer.name, producer.op, producer.sizes(graph)),
                            (consumer.name, consumer_op, consumer.sizes(graph))):
        side = generator(op, sizes, backend, target)
        if side and "generic" not in side:
            return (f"{backend} would emit the fused op only as generic loop nests; {name} "
                    f"would lose its {backend} kernel ({side})")
    return None
