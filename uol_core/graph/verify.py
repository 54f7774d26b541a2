"""Never a wrong answer: a compiled graph checks its outputs on the first call at each input
shape, against the torch module it was imported from (when the call uses the graph's own
parameters) or else the reference evaluator (every node run one by one in torch). On a
mismatch the call raises VerificationError instead of returning the tensors, naming the first
group whose output differs and by how much:

1. group by group, each group's outputs are compared with the reference evaluator's values of
   the same tensors: the first group off is a kernel (or fusion) that computes something else;
2. when every group is right run group by group, the memory-planned replay is re-run one step
   at a time and checked the same way: the first group off there reads or writes memory the
   plan gave to another tensor (an aliasing or in-place bug in the runtime);
3. when both are right, the graph computes what its nodes say, and the nodes say something
   other than the module: an import mapped an op with another meaning.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_leaves

from uol_core.graph.format import GraphError

TOLERANCE = 1e-3  # max |error| relative to the largest reference value (f32, sums of ~1e3 terms)


class VerificationError(GraphError):
    """A compiled graph's output differs from its reference; `detail` says where and by how much."""

    def __init__(self, message: str, detail: dict) -> None:
        super().__init__(message)
        self.detail = detail


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """max |got - ref| relative to max |ref|; inf when the shapes differ or a value is not
    finite where the reference is."""
    if tuple(got.shape) != tuple(ref.shape):
        return float("inf")
    ref64, got64 = ref.double(), got.double()
    if not torch.equal(torch.isfinite(ref64), torch.isfinite(got64)):
        return float("inf")
    finite = torch.isfinite(ref64)
    if not finite.any():
        return 0.0
    scale = max(ref64[finite].abs().max().item(), 1e-12)
    return (got64[finite] - ref64[finite]).abs().max().item() / scale


def output_errors(outputs: dict, expected: dict) -> dict[str, float]:
    """Each output's relative error; a missing output or a shape mismatch is a GraphError."""
    errors = {}
    for name, ref in expected.items():
        got = outputs[name]
        if tuple(got.shape) != tuple(ref.shape):
            raise GraphError(f"output {name} has shape {tuple(got.shape)}, expected {tuple(ref.shape)}")
        errors[name] = relative_error(got, ref)
    return errors


def expected_outputs(compiled, env: dict[str, torch.Tensor]) -> tuple[dict, str]:
    """What the graph must return on `env`, and what that comes from: the module, when the graph
    has one and `env` holds the graph's own parameters; else the reference evaluator."""
    graph = compiled.source
    own = all(env[p] is graph.values.get(p) for p in graph.params if p in env)
    if graph.module is not None and own:
        buffers = [(b, b.clone()) for b in graph.module.buffers()]
        with torch.no_grad():  # copies: a module that writes its input in place keeps it to itself
            result = graph.module(*[env[n].clone() for n in graph.inputs])
            for buffer, before in buffers:  # nor does the check change the module's state (a counter)
                if not torch.equal(buffer, before):  # an untouched buffer keeps its version:
                    buffer.copy_(before)  # a write would read as a changed weight (prepack)
        values = tree_leaves(result)
        if len(values) == len(graph.outputs) and all(isinstance(v, torch.Tensor) for v in values):
            return dict(zip(graph.outputs, values)), "torch module"
    values = reference_values(compiled, env)
    return {name: values[name] for name in graph.outputs}, "reference evaluator (torch, unfused)"


def reference_values(compiled, env: dict[str, torch.Tensor]) -> dict[str, object]:
    """Every tensor of the graph as the reference evaluator computes it, node by node."""
    # deferred: at the top this import closes a circle, and fails while the modules load
    from uol_core.graph.run import compile_graph

    if compiled.reference is None:
        compiled.reference = compile_graph(compiled.source, "reference", compiled.plan.target, fuse=False)
        compiled.reference.planned, compiled.reference.verify = False, False
    return compiled.reference.trace(env)


def check(compiled, env: dict[str, torch.Tensor], outputs: dict) -> float:
    """The largest output error of this call; raises VerificationError over TOLERANCE."""
    expected, against = expected_outputs(compiled, env)
    errors = output_errors(outputs, expected)
    worst = max(errors, key=errors.get, default=None)
    if worst is None or errors[worst] <= TOLERANCE:
        return errors[worst] if worst is not None else 0.0
    where, detail = locate(compiled, env)
    detail.update(output=worst, max_rel_error=errors[worst], against=against, tolerance=TOLERANCE)
    raise VerificationError(f"{compiled.source.name}: output {worst} differs from the {against} by "
                            f"{errors[worst]:.2e} (max rel., tolerance {TOLERANCE:g}); {where}", detail)


def locate(compiled, env: dict[str, torch.Tensor]) -> tuple[str, dict]:
    """Where a wrong output comes from (see the module doc): a sentence and its fields."""
    reference = reference_values(compiled, env)
    stepwise = compiled.trace(env)
    for group in compiled.plan.groups:
        for tensor in _written(compiled, group):
            got, ref = stepwise.get(tensor), reference.get(tensor)
            if not (isinstance(got, torch.Tensor) and isinstance(ref, torch.Tensor)):
                continue
            err = relative_error(got, ref)
            if err > TOLERANCE:
                return (f"first differing group: {_describe(compiled, group)} writes {tensor} "
                        f"off by {err:.2e} (max rel.) run group by group"), \
                    {"group": group.name, "nodes": list(group.nodes), "tensor": tensor,
                     "group_error": err, "stage": "kernel"}
    if compiled.planned:
        found = compiled.runner(env).first_difference(env, reference, TOLERANCE)
        if found is not None:
            name, tensor, err = found
            group = next(g for g in compiled.plan.groups if g.name == name)
            return (f"first differing group: {_describe(compiled, group)} writes {tensor} off by "
                    f"{err:.2e} (max rel.) in the memory-planned replay, while group by group it "
                    "is right (the replay reads or writes memory the plan gave another tensor)"), \
                {"group": name, "nodes": list(group.nodes), "tensor": tensor, "group_error": err,
                 "stage": "planned runtime"}
    detail = {"group": None, "nodes": [], "tensor": None, "group_error": None, "stage": "import"}
    compared, found = first_import_difference(compiled.source, env, stepwise)
    if found is not None:
        program_node, tensor, err = found
        detail.update(program_node=program_node, tensor=tensor, group_error=err)
        return (f"every group matches the reference evaluator; the first value off is the "
                f"exported program's node {program_node} (graph tensor {tensor}, off by {err:.2e} "
                "max rel.): its import computes something other than the module"), detail
    if compared:
        return ("every group matches the reference evaluator and every value matches the exported "
                "program: the module itself now computes otherwise (its weights or code changed "
                "after the import)"), detail
    return ("every group matches the reference evaluator, run group by group and in the planned "
            "replay: the graph's nodes compute something other than the module (an op imported "
            "with another meaning)"), detail


def first_import_difference(graph, env: dict[str, torch.Tensor], values: dict
                            ) -> tuple[bool, tuple[str, str, float] | None]:
    """The exported program run node by node on the call's inputs, each node's value compared
    (in program order) with the graph tensor that holds it in `values`: whether it ran, and
    (program node, graph tensor, relative error) of the first one over TOLERANCE or None."""
    if graph.program is None or not graph.origins:
        return False, None
    held: dict[str, list[str]] = {}
    for tensor, node in graph.origins.items():
        held.setdefault(node, []).append(tensor)
    found: list[tuple[str, str, float]] = []

    class Compare(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            for tensor in held.get(n.name, []) if not found else []:
                ours = values.get(tensor)
                if isinstance(result, torch.Tensor) and isinstance(ours, torch.Tensor) \
                        and ours.numel() == result.numel() and result.is_floating_point():
                    err = relative_error(ours.reshape(result.shape), result)
                    if err > TOLERANCE:
                        found.append((n.name, tensor, err))
            return result

    with torch.no_grad():
        Compare(graph.program.module()).run(*[env[n].clone() for n in graph.inputs])
    return True, found[0] if found else None


def _written(compiled, group) -> list[str]:
    if group.kind == "torch":
        return compiled.plan.graph.node(group.nodes[0]).writes()
    return list(group.outputs.values())


def _describe(compiled, group) -> str:
    route = compiled.routes.get(group.name)
    engine = route.engine if route is not None else "torch"
    return f"{group.name} ({', '.join(group.nodes)}; {engine})"
