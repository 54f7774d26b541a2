"""Whole-graph run: compile every group, run end to end, verify; time the graph against its torch
module and each group against the reference evaluator."""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from uol_core.graph.format import TORCH_DTYPES, Graph
from uol_core.graph.fusion import FusionPlan, Group, plan_fusion
from uol_core.graph.inplace import leaves, may_write, privatise, same_storage, written
from uol_core.graph.planned import PlannedGraph, page_faults
from uol_core.graph.prepack import ModuleConstants
from uol_core.graph.record import plan_run
from uol_core.graph.route import Route, route
from uol_core.graph.siblings import merge_sibling_gemms, param_value
from uol_core.graph.verify import (
    TOLERANCE,
    VerificationError,
    check,
    expected_outputs,
    locate,
    output_errors,
)
from uol_core.graph.view_fold import fold_views
from uol_core.runtime.turns import LEAD_IN_S, timed_turn


def make_inputs(graph: Graph, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random graph inputs and parameters (known parameter values are kept as they are)."""
    gen = torch.Generator().manual_seed(seed)
    env: dict[str, torch.Tensor] = {}
    for name, spec in {**graph.inputs, **graph.params}.items():
        if name in graph.values:
            env[name] = graph.values[name]
            continue
        dtype = TORCH_DTYPES[spec.dtype]
        if not dtype.is_floating_point and dtype != torch.bool:
            # integer inputs are ids or positions: 0 and 1 index any axis of two or more
            env[name] = torch.randint(0, 2, spec.shape, generator=gen, dtype=dtype)
            continue
        value = torch.randn(spec.shape, generator=gen)
        if name in graph.params:  # keep activations O(1) through deep stacks: scale by fan-in
            low = name.lower()
            fan_in = math.prod(spec.shape[1:]) if len(spec.shape) == 4 else spec.shape[0]
            if "var" in low:
                value = value.abs() + 0.5  # variances are positive
            elif "gamma" in low:
                value = 1.0 + 0.1 * value
            elif len(spec.shape) == 1:
                value = 0.1 * value
            else:
                value = value / math.sqrt(fan_in)
        env[name] = value.to(dtype)
    return env


def _resolve(value, env: dict):
    if isinstance(value, dict) and set(value) == {"tensor"}:
        return env[value["tensor"]]
    if isinstance(value, list):
        return [_resolve(v, env) for v in value]
    if isinstance(value, tuple):
        return tuple(_resolve(v, env) for v in value)
    if isinstance(value, dict):
        return {k: _resolve(v, env) for k, v in value.items()}
    return value


@dataclass
class CompiledGraph:
    """A fusion plan with a kernel (Route) per ODL group; call it with inputs and parameters.

    A call runs the memory-planned replay (planned.py) built on the first call at each input
    shape; with `timings` (per-group seconds) or `planned=False` it runs group by group, each
    group allocating its outputs, as the reference path for per-group rows. With `verify` (the
    default) the first call at each input shape checks its outputs (verify.py) and raises
    VerificationError, naming the first group that differs, instead of returning them; so
    does every later call at that shape.

    With `prepack` (the default) the planned replay runs each GEMM whose B is a parameter on
    its panels packed once (prepack.py; UOL_GRAPH_PREPACK=0 in the environment makes the
    default off, for before/after runs of a whole benchmark); a parameter of the graph or a tensor of its module
    written in place is seen by the next call (version counters, `constants`)."""

    plan: FusionPlan
    routes: dict[str, Route] = field(default_factory=dict)
    planned: bool = True
    runners: dict[tuple, PlannedGraph] = field(default_factory=dict, repr=False)
    source: Graph | None = None  # the graph as given (before the plan's rewrites)
    verify: bool = True
    checked: dict[tuple, float | VerificationError] = field(default_factory=dict, repr=False)
    reference: CompiledGraph | None = field(default=None, repr=False)
    written: dict[str, list[int]] = field(default_factory=dict, repr=False)
    fuse: bool = True
    respecialised: dict[tuple, CompiledGraph] = field(default_factory=dict, repr=False)
    prepack: bool = field(default_factory=lambda: os.environ.get("UOL_GRAPH_PREPACK", "1") != "0")
    constants: ModuleConstants | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.source is None:
            self.source = self.plan.graph
        if self.constants is None and self.source.module is not None:
            self.constants = ModuleConstants(self.source.module)

    def writes_of(self, node, args, kwargs) -> list[int]:
        """Which tensors (positions in `inplace.leaves((args, kwargs))`) torch node `node`
        writes in place; looked up once per node (see inplace.py)."""
        if node.label == "view":
            return []
        if node.name not in self.written:
            self.written[node.name] = written(node.fn, args, kwargs) \
                if may_write(node) or getattr(node.fn, "_schema", None) is None else []
        return self.written[node.name]

    def steps(self) -> list[tuple[Group, Callable[[dict], None]]]:
        """One callable per group that reads and writes the tensor environment. A torch node
        that writes in place into a graph input or parameter gets a private copy first."""
        graph = self.plan.graph
        own = set(graph.inputs) | set(graph.params)
        out: list[tuple[Group, Callable[[dict], None]]] = []
        for group in self.plan.groups:
            if group.kind == "torch":
                node = graph.node(group.nodes[0])

                def step(env, node=node):
                    args, kwargs = _resolve(node.args, env), _resolve(node.kwargs, env)
                    targets = list(leaves((args, kwargs)))
                    for k in self.writes_of(node, args, kwargs):
                        if any(isinstance(env.get(n), torch.Tensor) and same_storage(env[n], targets[k])
                               for n in own):
                            privatise(env, targets[k])
                            args, kwargs = _resolve(node.args, env), _resolve(node.kwargs, env)
                            targets = list(leaves((args, kwargs)))
                    env[node.writes()[0]] = node.fn(*args, **kwargs)
            else:
                r = self.routes[group.name]

                def step(env, group=group, r=r):
                    result = r.run({k: env[v] for k, v in group.inputs.items()})
                    for k, v in group.outputs.items():
                        env[v] = result[k]
            out.append((group, step))
        return out

    def shape_key(self, env: dict[str, torch.Tensor]) -> tuple:
        return tuple((n, tuple(env[n].shape), env[n].dtype) for n in self.plan.graph.inputs)

    def at_shapes(self, env: dict[str, torch.Tensor]) -> CompiledGraph:
        """The compiled graph for the input shapes of `env`: this one when they are the shapes
        it was imported at; for an imported model called at other shapes (another batch or
        sequence length), the model imported and compiled again at those shapes, once per
        shape. torch.export specialises every shape, so the imported graph's reshapes and
        broadcasts hold only at its own; a graph from a file keeps its declared shapes."""
        graph = self.source
        declared = {n: spec.shape for n, spec in graph.inputs.items()}
        given = {n: tuple(env[n].shape) for n in graph.inputs if isinstance(env.get(n), torch.Tensor)}
        if given == declared or graph.module is None or len(given) != len(declared):
            return self
        key = tuple(given.items())
        if key not in self.respecialised:
            # import_model lives above run.py (it builds graphs that this module runs)
            from uol_core.graph.export_import import import_model

            fresh = import_model(graph.module, *(env[n] for n in graph.inputs), name=graph.name)
            self.respecialised[key] = compile_graph(fresh, self.plan.backend, self.plan.target, self.fuse)
            self.respecialised[key].verify = self.verify
            self.respecialised[key].prepack = self.prepack
        return self.respecialised[key]

    def runner(self, env: dict[str, torch.Tensor]) -> PlannedGraph:
        """The planned replay for the shapes of `env`, built on first use (and rebuilt when the
        parameter tensors in `env` are not the ones it was built on)."""
        key = self.shape_key(env)
        runner = self.runners.get(key)
        if runner is None or not runner.binds(env):
            runner = self.runners[key] = plan_run(self, env)
        return runner

    def trace(self, env: dict[str, torch.Tensor], timings: dict[str, float] | None = None) -> dict:
        """Run group by group; every tensor of the run (inputs, parameters, each group's outputs)."""
        graph = self.plan.graph
        env = {**env, **{name: param_value(graph, self.plan.derived, name, env)
                         for name in graph.params if name not in env}}
        with torch.no_grad():
            for group, step in self.steps():
                start = time.perf_counter()
                step(env)
                if timings is not None:
                    timings[group.name] = time.perf_counter() - start
        return env

    def __call__(self, env: dict[str, torch.Tensor], timings: dict[str, float] | None = None,
                 out: dict[str, torch.Tensor] | None = None) -> dict:
        """Run the graph; returns its outputs (written into `out`'s tensors where given).
        With `timings`, runs group by group and adds each group's seconds to it."""
        other = self.at_shapes(env)
        if other is not self:
            return other(env, timings, out)
        if self.constants is not None and self.constants.changed():
            self.constants.refresh(self, env)  # a module tensor written in place since the last call
        key = self.shape_key(env) if self.verify else None
        failed = self.checked.get(key)
        if isinstance(failed, VerificationError):
            raise failed
        if timings is None and self.planned:
            with torch.no_grad():
                result = self.runner(env)(env, out)
        else:
            values = self.trace(env, timings)
            result = {name: values[name] for name in self.plan.graph.outputs}
            for name, tensor in (out or {}).items():
                tensor.copy_(result[name])
                result[name] = tensor
        if self.verify and key not in self.checked:
            try:
                self.checked[key] = check(self, env, result)
            except VerificationError as err:
                self.checked[key] = err
                raise
            finally:  # the check restores the module's buffers: a write, but not a change
                if self.constants is not None:
                    self.constants.settle()
        return result


def plan_graph(graph: Graph, backend: str = "c", target: str = "host", fuse: bool = True
               ) -> FusionPlan:
    """The plan a graph runs by: sibling GEMMs merged, views folded into their readers, then
    fusion; `plan.graph` is the rewritten graph and `plan.view_folds` / `plan.siblings` say
    what each rewrite did. `fuse=False` keeps every node as it is. compile_graph builds its
    kernels from this plan, and the IDE and `uol graph show` draw it, so what they show is
    what runs."""
    folds: list[dict] = []
    siblings: list[dict] = []
    derived: dict = {}
    if fuse:
        graph, siblings, derived = merge_sibling_gemms(graph)
        graph, folds = fold_views(graph, backend, target)
    plan = plan_fusion(graph, backend, target, fuse)
    plan.view_folds, plan.siblings, plan.derived = folds, siblings, derived
    return plan


def compile_graph(graph: Graph, backend: str = "c", target: str = "host", fuse: bool = True) -> CompiledGraph:
    """Plan the graph (`plan_graph`) and build a kernel for every ODL group (reference
    evaluator where none emits); `fuse=False` keeps every node as it is."""
    plan = plan_graph(graph, backend, target, fuse)
    routes = {g.name: route(g.op, g.sizes(plan.graph), backend, target)
              for g in plan.groups if g.kind == "odl"}
    return CompiledGraph(plan, routes, source=graph, fuse=fuse)


def max_error(outputs: dict, expected: dict) -> float:
    """Largest |difference| over all outputs, relative to the largest expected magnitude."""
    return max(output_errors(outputs, expected).values(), default=0.0)


def interleaved_times(fns: dict[str, Callable[[], object]], rounds: int,
                      lead_in_s: float = LEAD_IN_S) -> dict[str, list[float]]:
    """Seconds of every timed call of each contender, turns alternated round by round after one
    warm-up call each, so that load from other processes on shared cores hits all alike. Each
    turn calls its contender untimed for `lead_in_s` (50 ms; PEER_LEAD_IN_S among the
    deployment runtimes) before the timed call: what the previous
    contender left running (a pool spinning on) lands on those calls, as it never does in a
    deployment with one runtime per process (uol_core/runtime/turns.py)."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(timed_turn(fn, lead_in_s))
    return times


def interleaved_ms(fns: dict[str, Callable[[], object]], rounds: int,
                   lead_in_s: float = LEAD_IN_S) -> dict[str, float]:
    """Median ms of each contender over `rounds` alternated calls (see interleaved_times)."""
    return {name: statistics.median(v) * 1e3
            for name, v in interleaved_times(fns, rounds, lead_in_s).items()}


def torch_compiled(module) -> tuple[Callable | None, str]:
    """torch.compile of the module (inductor), or (None, why) when it cannot be built here."""
    try:
        return torch.compile(module), ""
    except Exception as err:  # no toolchain for inductor, unsupported platform: say so
        return None, str(err).splitlines()[0][:200]


def runtime_report(compiled: CompiledGraph, env: dict[str, torch.Tensor], calls: int = 5) -> dict:
    """What the memory-planned runtime did for this graph: the arena plan and its explanation,
    kernels per driver call, copies, page faults per steady-state call, dispatch overhead."""

    runner = compiled.runner(env)
    with torch.no_grad():
        out = {k: v.clone() for k, v in compiled(env).items()}
        before = page_faults()
        for _ in range(calls):
            compiled(env, out=out)
        faults = (page_faults() - before) / calls
    return {**runner.stats.to_dict(), "plan": runner.stats.memory.explain(),
            "page_faults_per_call": faults, "dispatch_overhead_us": runner.overhead_us(50)}


def run_graph(graph: Graph, backend: str = "c", target: str = "host", repeat: int = 5,
              fuse: bool = True, seed: int = 0, compare_compile: bool = False) -> dict:
    """Compile, run, verify and time a graph; returns a JSON-ready report with per-group rows.

    The whole-graph speed is measured against the torch module an imported graph came from
    (eager, and torch.compile with `compare_compile`), calls alternated in one run. A graph
    file has no module: its report gives no whole-graph speedup. Per-group rows compare each
    group with the same nodes run one by one in the reference evaluator (`reference_ms`)."""
    compiled = compile_graph(graph, backend, target, fuse)
    compiled.verify = False  # checked below against the same reference, into the report
    reference = compile_graph(graph, "reference", target, fuse=False)  # one node at a time
    reference.verify = False
    compiled.reference = reference
    env = make_inputs(graph, seed)
    outputs = compiled(env)
    args = [env[n] for n in graph.inputs]
    expected, against = expected_outputs(compiled, env)
    error = max_error(outputs, expected)
    mismatch = None
    if error > TOLERANCE:  # where it comes from, as a Python caller's first call would say
        where, detail = locate(compiled, env)
        mismatch = {"message": where, **detail}
    ours: dict[str, list[float]] = {}
    theirs: dict[str, list[float]] = {}
    for _ in range(repeat):
        t: dict[str, float] = {}
        compiled(env, t)
        for k, v in t.items():
            ours.setdefault(k, []).append(v)
        e: dict[str, float] = {}
        reference(env, e)
        for k, v in e.items():
            theirs.setdefault(k, []).append(v)
    contenders: dict[str, Callable[[], object]] = {"uol": lambda: compiled(env)}
    compile_note = ""
    if graph.module is not None:
        contenders["eager"] = lambda: graph.module(*args)
        if compare_compile:
            fn, compile_note = torch_compiled(graph.module)
            if fn is not None:
                contenders["compile"] = lambda: fn(*args)
    try:
        with torch.no_grad():
            ms = interleaved_ms(contenders, repeat)
    except Exception as err:  # torch.compile fails on first call when inductor cannot build
        if "compile" not in contenders:
            raise
        compile_note = str(err).splitlines()[0][:200]
        contenders.pop("compile")
        with torch.no_grad():
            ms = interleaved_ms(contenders, repeat)
    total_ms = ms["uol"]
    # each kernel as the planned replay runs it, in the model's order (where the whole-graph
    # time comes from), and the same kernel repeated on its own, caches warm: the difference
    # is what the chain costs it (data and filter no longer in cache). A group without one
    # (torch, reference) keeps its time run alone.
    with torch.no_grad():
        runner = compiled.runner(env) if compiled.planned else None
        inside = runner.chain_seconds(env, max(3, repeat)) if runner else {}
        warm = runner.kernel_seconds(env, max(3, repeat)) if runner else {}
    alone = {name: statistics.median(v) * 1e3 for name, v in ours.items()}
    group_times = {g.name: inside[g.name] * 1e3 if g.name in inside else alone[g.name]
                   for g in compiled.plan.groups}
    rows = []
    groups_ms = sum(group_times.values())
    merged = {d["node"]: d["nodes"] for d in compiled.plan.siblings if d["merged"]}
    replaced = {n for nodes in merged.values() for n in nodes}  # now slices of the merged GEMM
    for group in compiled.plan.groups:
        group_ms = group_times[group.name]
        originals = [o for n in group.nodes for o in merged.get(n, [n])
                     if not (group.kind == "torch" and n in replaced)]
        ref_ms = sum(statistics.median(theirs[n]) for n in originals if n in theirs) * 1e3
        r = compiled.routes.get(group.name)
        note = r.note if r else compiled.plan.graph.node(group.nodes[0]).label
        rows.append({"group": group.name, "nodes": group.nodes, "pattern": group.pattern,
                     "engine": r.engine if r else "torch", "op": group.op.name if group.op else "",
                     "ms": group_ms, "alone_ms": alone[group.name], "in_replay": group.name in inside,
                     "warm_ms": warm[group.name] * 1e3 if group.name in warm else None,
                     "reference_ms": ref_ms, "torch_ms": ref_ms,
                     "speedup": ref_ms / group_ms if group_ms else None,
                     "share": group_ms / groups_ms if groups_ms else 0.0,
                     "note": note})
    opaque = [{"node": n.name, "source": n.source, "reason": n.label.removeprefix("opaque: ")}
              for n in graph.nodes if n.kind == "torch" and n.label.startswith("opaque")]
    report = {"graph": graph.name, "backend": backend, "target": target,
              "nodes": len(graph.nodes), "groups": len(compiled.plan.groups),
              "verified": error <= TOLERANCE, "max_rel_error": error, "against": against,
              "mismatch": mismatch,
              "total_ms": total_ms, "reference_nodes_ms": None, "opaque": opaque,
              "rows": rows, "hotspots": [r["group"] for r in sorted(rows, key=lambda r: -r["ms"])[:3]],
              "fusion": compiled.plan.to_dict()["decisions"],
              "torch_eager_ms": ms.get("eager"), "torch_compile_ms": ms.get("compile"),
              "speed_baseline": "torch module, calls alternated in one run" if graph.module is not None
              else "none: a graph file has no torch module (per-group rows: reference evaluator)"}
    report["reference_nodes_ms"] = sum(r["reference_ms"] for r in rows)
    report["runtime"] = runtime_report(compiled, env)
    report["speedup_vs_eager"] = ms["eager"] / total_ms if "eager" in ms and total_ms else None
    report["speedup_vs_compile"] = ms["compile"] / total_ms if "compile" in ms and total_ms else None
    if compare_compile and compile_note:
        report["torch_compile_error"] = compile_note
    return report
