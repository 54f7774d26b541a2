"""Pipeline-parallel schedules (GPipe, 1F1B, interleaved) with data parallelism, stragglers and layer re-balancing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hcf_sim.errors import HcfError, require_nonnegative, require_positive
from hcf_sim.simulation.overlap import Event

SCHEDULES = ("gpipe", "1f1b", "interleaved")


@dataclass
class PipelineResult:
    """A simulated pipeline step: makespan, per-rank busy/bubble/comm, utilisation and the timeline."""

    schedule: str
    stages: int
    microbatches: int
    makespan: float
    compute: list[float]
    exposed_comm: list[float]
    bubble: list[float]
    utilisation: float  # compute / (stages x makespan), over all pipeline ranks
    ideal_bubble_fraction: float  # (p-1)/(m+p-1) (GPipe, 1F1B) or its 1/v share (interleaved)
    events: list[Event] = field(default_factory=list)


def _order(schedule: str, d: int, s: int, m: int, v: int) -> list[tuple[str, int, int]]:
    # per-device list of (F|B, micro-batch, chunk); chunk c of device d is virtual stage c*s + d
    if schedule == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
    if schedule == "1f1b":
        warm = min(s - d - 1, m)
        out = [("F", i, 0) for i in range(warm)]
        for i in range(m - warm):
            out += [("F", warm + i, 0), ("B", i, 0)]
        return out + [("B", i, 0) for i in range(m - warm, m)]
    total = m * v  # Megatron's interleaved 1F1B: groups of s micro-batches cycle through the chunks

    def mb(k: int) -> int:
        return (k // (s * v)) * s + k % s

    fwd = [("F", mb(k), (k // s) % v) for k in range(total)]
    bwd = [("B", mb(k), v - 1 - (k // s) % v) for k in range(total)]
    warm = min((s - d - 1) * 2 + (v - 1) * s, total)
    out = fwd[:warm]
    for i in range(total - warm):
        out += [fwd[warm + i], bwd[i]]
    return out + bwd[total - warm:]


def _chunks(schedule: str, stages: int, microbatches: int, chunks: int) -> int:
    # model chunks per rank, once the schedule and the counts are known to fit together
    if schedule not in SCHEDULES:
        raise HcfError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    for name, n in (("stages", stages), ("micro-batches", microbatches)):
        if not isinstance(n, int) or n < 1:
            raise HcfError(f"{name} must be an integer >= 1, got {n!r}")
    v = chunks if schedule == "interleaved" else 1
    if schedule == "interleaved" and (v < 2 or microbatches % stages):
        raise HcfError(f"interleaved needs chunks >= 2 and micro-batches divisible by stages "
                       f"({microbatches} % {stages} != 0); use --microbatches {stages * max(1, microbatches // stages)}")
    return v


def _stage_times(stages: int, fwd_s: float | Sequence[float], bwd_ratio: float, bwd_s: Sequence[float] | None,
                 slowdown: Sequence[float] | None) -> tuple[list[float], list[float], list[float]]:
    # per stage: forward, backward (measured, else forward x ratio) and slowdown, one each
    fwd = [fwd_s] * stages if isinstance(fwd_s, int | float) else list(fwd_s)
    bwd = [f * bwd_ratio for f in fwd] if bwd_s is None else list(bwd_s)
    slow = list(slowdown) if slowdown else [1.0] * stages
    for name, values in (("forward time", fwd), ("backward time", bwd), ("slowdown factor", slow)):
        if len(values) != stages:
            raise HcfError(f"give one {name} per stage ({stages}), got {len(values)}")
    for x in (*fwd, *bwd, *slow):
        require_positive("stage time / slowdown", x)
    return fwd, bwd, slow


def simulate_pipeline(stages: int, microbatches: int, schedule: str = "1f1b", fwd_s: float | Sequence[float] = 1e-3,
                      bwd_ratio: float = 2.0, p2p_s: float = 0.0, chunks: int = 2, dp_allreduce_s: float = 0.0,
                      slowdown: Sequence[float] | None = None,
                      bwd_s: Sequence[float] | None = None,
                      p2p_draw: Callable[[], float] | None = None,
                      action_draw: Callable[[int, str], float] | None = None) -> PipelineResult:
    """Simulate one pipeline step; fwd_s is per stage per micro-batch, dp_allreduce_s the gradient all-reduce across replicas.

    bwd_s, when given, is each stage's measured backward time per micro-batch (it replaces fwd_s x bwd_ratio).
    p2p_draw, when given, returns each stage-to-stage handover's delay in turn (in place of p2p_s):
    a step under delays that vary, which a schedule's length does not average out. action_draw,
    when given, returns each action's time from its stage and kind ('F', 'B') in the same way.
    """
    v = _chunks(schedule, stages, microbatches, chunks)
    fwd, bwd, slow = _stage_times(stages, fwd_s, bwd_ratio, bwd_s, slowdown)
    require_nonnegative("p2p time", p2p_s)
    require_nonnegative("DP all-reduce time", dp_allreduce_s)
    nv = stages * v
    done: dict[tuple[str, int, int], float] = {}  # (kind, mb, virtual stage) -> finish time
    orders = [_order(schedule, d, stages, microbatches, v) for d in range(stages)]
    ptr, free = [0] * stages, [0.0] * stages
    busy, events = [0.0] * stages, []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for d in range(stages):
            while ptr[d] < len(orders[d]):
                kind, i, c = orders[d][ptr[d]]
                vs = c * stages + d
                if kind == "F":
                    dep = ("F", i, vs - 1) if vs > 0 else None
                else:
                    dep = ("B", i, vs + 1) if vs < nv - 1 else ("F", i, vs)
                if dep is not None and dep not in done:
                    break
                hop = (p2p_draw() if p2p_draw else p2p_s) if dep is not None and dep[2] != vs else 0.0
                ready = 0.0 if dep is None else done[dep] + hop
                dur = (action_draw(d, kind) if action_draw else (fwd[d] if kind == "F" else bwd[d]) / v) * slow[d]
                start = max(free[d], ready)
                done[(kind, i, vs)] = free[d] = start + dur
                busy[d] += dur
                events.append(Event(d, "compute", start, start + dur, f"{kind}{i}" + (f".{c}" if v > 1 else "")))
                ptr[d] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise HcfError(f"schedule {schedule} deadlocked with {stages} stages and {microbatches} micro-batches")
    exposed = []
    for d in range(stages):  # each stage all-reduces its gradients across pipelines once its last backward ends
        if dp_allreduce_s:
            events.append(Event(d, "comm", free[d], free[d] + dp_allreduce_s, "DP all-reduce"))
        exposed.append(dp_allreduce_s)
    makespan = max(f + dp_allreduce_s for f in free)
    bubble = [makespan - busy[d] - exposed[d] for d in range(stages)]
    for d in range(stages):
        t = 0.0
        for e in sorted((e for e in events if e.rank == d and e.kind == "compute"), key=lambda e: e.start):
            if e.start > t + 1e-15:
                events.append(Event(d, "bubble", t, e.start, "idle"))
            t = e.end
    ideal = (stages - 1) / (microbatches + stages - 1)
    if v > 1:
        ideal = (stages - 1) / v / (microbatches + (stages - 1) / v)
    return PipelineResult(schedule, stages, microbatches, makespan, busy, exposed, bubble,
                          sum(busy) / (stages * makespan), ideal, events)


def balance_layers(layer_cost: Sequence[float], stages: int, speed: Sequence[float] | None = None) -> list[int]:
    """Contiguous split of layers over stages minimising the slowest stage (cost x slowdown); returns layers per stage."""
    n = len(layer_cost)
    if stages < 1 or n < stages:
        raise HcfError(f"cannot split {n} layers over {stages} stages: need at least one layer per stage")
    slow = list(speed) if speed else [1.0] * stages
    pre = [0.0]
    for c in layer_cost:
        pre.append(pre[-1] + c)
    inf = float("inf")
    # best[s][i]: minimal bottleneck placing the first i layers on the first s stages
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for s in range(1, stages + 1):
        for i in range(s, n - (stages - s) + 1):
            for j in range(s - 1, i):
                val = max(best[s - 1][j], (pre[i] - pre[j]) * slow[s - 1])
                if val < best[s][i]:
                    best[s][i], cut[s][i] = val, j
    counts, i = [], n
    for s in range(stages, 0, -1):
        j = cut[s][i]
        counts.append(i - j)
        i = j
    return counts[::-1]


def rebalance(layers_per_stage: Sequence[int], measured_stage_s: Sequence[float],
              layer_cost: Sequence[float] | None = None) -> dict:
    """Dynamic load balancing: infer each stage's slowdown from measured times and re-assign layers to even them out."""
    if len(layers_per_stage) != len(measured_stage_s):
        raise HcfError("give one measured time per stage")
    n = sum(layers_per_stage)
    cost = list(layer_cost) if layer_cost else [1.0] * n
    if len(cost) != n:
        raise HcfError(f"layer_cost has {len(cost)} entries but the stages hold {n} layers")
    slow, k = [], 0
    for cnt, t in zip(layers_per_stage, measured_stage_s, strict=True):
        require_positive("measured stage time", t)
        nominal = sum(cost[k:k + cnt])
        slow.append(t / nominal)
        k += cnt
    new = balance_layers(cost, len(layers_per_stage), slow)
    k, after = 0, []
    for cnt, s in zip(new, slow, strict=True):
        after.append(sum(cost[k:k + cnt]) * s)
        k += cnt
    return {"layers_before": list(layers_per_stage), "layers_after": new, "slowdown": slow,
            "bottleneck_before": max(measured_stage_s), "bottleneck_after": max(after),
            "speedup": max(measured_stage_s) / max(after)}
