"""Search space of the non-GEMM C kernels (maps, rows, stencils, scans, fused ops), as named
constraints, and the roofline model a tuning session ranks it with (`PatternModel`).

Knobs: threads, chunk (outer iterations handed to a thread at a time: rows per thread),
vec (simd length; 0 lets gcc choose) and fuse (statement fusion on/off). A bf16 GEMM and a
flash attention (forward or backward) get the knobs their templates read instead
(backends/c/gemm/space_bf16.py, backends/c/attention/space.py). Every hardware number
(cores, vector bits, L2 size, bandwidth) comes from the HFL target; each constraint records how
many assignments of the full product it alone removes. The cost model is a roofline (bytes
over bandwidth, FLOPs over the peak) plus one fork and join for a split (HFL fork_join_cycles).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import constraint

from uol_core.acg.explain import Explanation
from uol_core.acg.fusion import FusionPlan, flat_map, plan_fusion, tensors_read
from uol_core.acg.space_core import (
    Config,
    Constraint,
    Space,
    count_removed,
    keyword_test,
    parse_key,
)
from uol_core.acg.tuning_models import TuningModel
from uol_core.backends.c.attention.space import (
    attention_domains_and_rules,
    attention_shape,
    causal_note,
    distance_from_default,
    predict_attention_seconds,
)
from uol_core.backends.c.gemm.space_bf16 import (
    bf16_domains_and_rules,
    is_bf16_gemm,
    predict_bf16_seconds,
)
from uol_core.backends.contract import Tuned
from uol_core.hfl.roofline import fork_join_seconds
from uol_core.odl.check import stmt_extents
from uol_core.odl.cost import op_cost
from uol_core.odl.ir import Op
from uol_core.odl.shapes import shape_of

# bf16_isa: bf16 GEMMs only; bq, bk: flash attention only
VARIABLES = ("threads", "chunk", "vec", "fuse", "bf16_isa", "bq", "bk")


def _defaults() -> dict:
    return {"threads": 1, "chunk": 0, "vec": 0, "fuse": 1}


def pattern_config(values: Mapping) -> Config:
    """A pattern config with its knobs in VARIABLES order (the tuning database key's order)."""
    return Config({k: values[k] for k in VARIABLES if k in values})


# A pass of flat maps (one loop, vectorised and split across threads) counts its work in
# blocks of this many vectors: a thread's share below a few blocks costs more to hand out
# (waking a thread) than it takes to compute.
VECTORS_PER_BLOCK = 64


def _outer_extent(op: Op, sizes: Mapping[str, int], plan: FusionPlan, lanes: int) -> int:
    """Iterations of the largest loop nest threads split: a pass's shared loops, or for a pass
    of flat maps its one loop in blocks of VECTORS_PER_BLOCK vectors."""
    def extent(g) -> int:
        if g.depth:
            return math.prod(g.extents)
        if flat_map(op, g.stmts[0]):
            stmt = op.stmts[g.stmts[0]]
            n = stmt_extents(op, g.stmts[0]).free[stmt.indices[0]].evaluate(dict(sizes))
            return n // (lanes * VECTORS_PER_BLOCK)
        return 1
    return max((extent(g) for g in plan.groups), default=1)


def _private_bytes(op: Op, sizes: Mapping[str, int], plan: FusionPlan) -> int:
    """Bytes of per-thread private slices in the fused plan."""
    total = 0
    for g in plan.groups:
        for name in g.private:
            total += math.prod(shape_of(op, name, sizes)[g.depth:]) * 8
    return total


def build_pattern_space(op: Op, sizes: Mapping[str, int], target) -> Space:
    """Solve the space with python-constraint2; constraints carry the target's numbers. A bf16
    GEMM gets the knobs its template reads (backends/c/gemm/space_bf16.py)."""
    if is_bf16_gemm(op, sizes):
        domains, named = bf16_domains_and_rules(target)
        return _solved(domains, named, op, sizes, target)
    attention = attention_shape(op, sizes, target)
    if attention is not None:
        domains, named = attention_domains_and_rules(attention, target)
        space = _solved(domains, named, op, sizes, target)
        note = causal_note(attention, space.configs)
        space.notes.extend([note] if note else [])
        return space
    cores = int(target.cores or 1)
    lanes = int(target.vector_bits or 128) // 32
    fused = plan_fusion(op, sizes)
    outer = _outer_extent(op, sizes, fused, lanes)
    domains = {"threads": sorted({1, cores}), "chunk": [0, 1, 4, 16, 64],
               "vec": [0, lanes, 2 * lanes], "fuse": [1, 0] if len(op.stmts) > 1 else [1]}
    private, l2 = _private_bytes(op, sizes, fused), int(target.l2_bytes or 1 << 20)
    # Each rule: its name, the formula a person reads, the same test as a function (the
    # numbers are the target's; no text is evaluated), and the HFL facts it uses.
    rows = [
        ("cores", f"threads <= {cores}", lambda threads: threads <= cores, ("cores",)),
        ("work per thread", f"chunk == 0 or {outer} // chunk >= threads",
         lambda chunk, threads: chunk == 0 or outer // chunk >= threads, ()),
        ("vector width", f"vec == 0 or (vec % {lanes} == 0 and vec <= {2 * lanes})",
         lambda vec: vec == 0 or (vec % lanes == 0 and vec <= 2 * lanes), ("vector_bits",)),
        ("private slices fit L2", f"fuse == 0 or {private} <= {l2}",
         lambda fuse: fuse == 0 or private <= l2, ("l2_bytes",)),
        ("parallel pays", f"threads == 1 or {outer} >= threads * 4",
         lambda threads: threads == 1 or outer >= threads * 4, ("cores",)),
    ]
    named = []
    for name, formula, test, facts in rows:
        variables = tuple(v for v in VARIABLES if v in formula)
        named.append(count_removed(Constraint(name, formula, variables,
                                              keyword_test(test, variables), facts), domains))
    return _solved(domains, named, op, sizes, target)


def _solved(domains: dict[str, list], named: list[Constraint], op: Op,
            sizes: Mapping[str, int], target) -> Space:
    """The space's legal configs, in knob order."""
    problem = constraint.Problem()
    for var, dom in domains.items():
        problem.addVariable(var, dom)
    for rule in named:
        problem.addConstraint(constraint.FunctionConstraint(rule.test), list(rule.variables))
    configs = [pattern_config(c) for c in problem.getSolutions()]
    configs.sort(key=lambda c: tuple(str(c[k]) if k == "bf16_isa" else c[k] for k in c))
    # a pattern space: its op at these sizes on `target`; a config is checked with the
    # kernels' defaults for the knobs it leaves out
    return Space(domains, named, configs, family="pattern", target=target,
                 facts={"op": op, "sizes": dict(sizes)}, defaults=_defaults())


def traffic_bytes(op: Op, sizes: Mapping[str, int], fuse: bool) -> int:
    """Bytes moved through memory: each pass reads every tensor it uses and writes what it
    produces once; intermediates private to a pass never reach memory."""
    plan = plan_fusion(op, sizes, enabled=fuse)
    size = {d.name: math.prod(shape_of(op, d.name, sizes)) * d.dtype.itemsize
            for d in op.inputs + op.outputs + op.locals}
    total = 0
    for group in plan.groups:
        touched: set[str] = set()
        for i in group.stmts:
            stmt = op.stmts[i]
            touched.add(stmt.target)
            touched.update(tensors_read(op, i))
        total += sum(size[t] for t in touched - set(group.private) if t in size)
    return total


def predict_seconds(op: Op, sizes: Mapping[str, int], target, cfg: Mapping) -> float:
    """Roofline estimate: memory traffic over bandwidth (scaled by threads) or the FLOPs over
    the threads' share of the peak, whichever is longer, plus a per-chunk cost and, split
    across threads, one fork and join; a bf16 GEMM's FLOPs over its unit's peak."""
    if "bf16_isa" in cfg or "bq" in cfg:
        flops = op_cost(op, sizes).flops
        if "bq" in cfg:
            return predict_attention_seconds(attention_shape(op, sizes, target), flops,
                                             target, cfg)
        return predict_bf16_seconds(flops, target, cfg)
    bw = float(target.mem_bandwidth_gbps or 10.0) * 1e9
    cores = max(1, int(target.cores or 1))
    share = min(1.0, 0.5 + 0.5 * cfg["threads"] / cores)
    seconds = traffic_bytes(op, sizes, bool(cfg["fuse"])) / (bw * share)
    # a convolution or a reduction of few bytes may still be bound by its arithmetic, which
    # its threads share (the peak is every core's)
    peak = float(target.peak_gflops.get("fp32") or 1.0) * 1e9 * cfg["threads"] / cores
    seconds = max(seconds, op_cost(op, sizes).flops / peak)
    chunk_penalty = 1e-7 * (1 if cfg["chunk"] else 0)  # dynamic-size chunks cost a little
    # a split pays only once each thread's share outlasts the fork and join (HFL)
    fork_join = fork_join_seconds(target, cfg["threads"])
    return seconds + chunk_penalty + fork_join + (0 if cfg["vec"] == 0 else 1e-9)


TUNED_BUDGET = 6  # measurements for config='tuned' when nothing is recorded yet


def choose_pattern_config(op: Op, sizes: Mapping[str, int], target,
                          request: Mapping | str | None = None) -> tuple[dict, Space]:
    """The model's best legal config with the user's overrides on top ('chunk=4,vec=8' or a dict;
    a `Tuned` request the best recorded config, tuning with a small budget when there is none)."""
    space = build_pattern_space(op, sizes, target)
    attention = attention_shape(op, sizes, target)

    def preference(c: Mapping) -> float:  # among equal predictions
        return distance_from_default(attention, c) if attention else -c.get("fuse", 1)

    best = min(space.configs, key=lambda c: (predict_seconds(op, sizes, target, c),
                                             preference(c))) \
        if space.configs else _defaults()
    if isinstance(request, Tuned):
        found = request.lookup(TUNED_BUDGET)
        return (dict(found) if found is not None else None) or best, space
    if isinstance(request, str):
        request = parse_key(request)
    cfg = {**best, **dict(request or {})}
    return cfg, space


def explain_pattern(space: Space, cfg: Mapping, src, measured: dict | None = None):
    """An Explanation of a non-GEMM kernel: fusion plan, constraints, byte roofline, HFL facts."""

    target, op, sizes = space.target, space.facts["op"], space.facts["sizes"]
    seconds = predict_seconds(op, sizes, target, {**_defaults(), **cfg})
    nbytes = traffic_bytes(op, sizes, bool(cfg.get("fuse", 1)))
    binding = [c.name + ": " + c.formula for c in space.constraints if c.removed]
    facts = [{"field": f, "value": getattr(target, f, None), "provenance": "HFL target"}
             for f in ("cores", "vector_bits", "l2_bytes", "mem_bandwidth_gbps")]
    roofline = {"bound": "memory", "bytes": nbytes, "predicted_seconds": seconds,
                "attainable_gflops": 0.0, "predicted_gflops": 0.0}
    if "bf16_isa" in cfg or "bq" in cfg:  # GEMMs: bound by a unit's peak (bf16, attention)

        flops = op_cost(op, sizes).flops
        roofline.update(bound="compute", attainable_gflops=flops / seconds / 1e9,
                        predicted_gflops=flops / seconds / 1e9)
        facts.append({"field": "isa", "value": list(getattr(target, "isa", []) or []),
                      "provenance": "HFL target"})
    return Explanation(op.name, dict(sizes), dict(cfg), binding=binding, roofline=roofline,
                       legal_configs=len(space.configs), measured=dict(measured or {}),
                       hfl_facts=facts, constraints=space.report(),
                       picture=src.meta.get("fusion", ""))


class PatternModel(TuningModel):
    """The pattern kernels' roofline (`predict_seconds` above), in GFLOP/s of the
    op's own work (the worker counts GEMM FLOPs only)."""

    def __init__(self, op: Any, sizes: Mapping[str, int], target: Any) -> None:
        self.op, self.sizes, self.target = op, dict(sizes), target
        self.flops = op_cost(op, self.sizes).flops

    def rank(self, configs: list) -> list[tuple[Any, float]]:
        return sorted(((c, self.estimate(c)) for c in configs), key=lambda pair: -pair[1])

    def estimate(self, cfg: Any) -> float:
        return self.flops / predict_seconds(self.op, self.sizes, self.target, cfg) / 1e9

    def parse(self, text: str) -> Any:
        return pattern_config(parse_key(text))
