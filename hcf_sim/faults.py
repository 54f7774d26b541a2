"""Faults: fail a link, switch or node, reroute, re-plan the collective, report slowdown and recovery time."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from hcf_sim.errors import HcfError, require_nonnegative, require_positive
from hcf_sim.flowsim import Router
from hcf_sim.schedules import phases
from hcf_sim.selector import candidates
from hcf_sim.service import CommResult, simulate
from hcf_sim.topology import Topology

FAULT_KINDS = ("link", "switch", "node")


def fail_link(topo: Topology, u: str, v: str) -> Topology:
    """A copy of topo without the link u-v; raises HcfError if that splits the GPUs."""
    if not topo.graph.has_edge(u, v):
        raise HcfError(f"cannot fail link {u}-{v}: it is not in {topo.name} (see `uol hcf topology --links`)")
    t = topo.copy()
    t.graph.remove_edge(u, v)
    t.name = f"{topo.name} without link {u}-{v}"
    return t.validate()


def fail_switch(topo: Topology, name: str) -> Topology:
    """A copy of topo without switch `name` and its links."""
    if name not in topo.graph or topo.graph.nodes[name].get("kind") != "switch":
        raise HcfError(f"cannot fail switch {name!r}: no such switch in {topo.name}")
    t = topo.copy()
    t.graph.remove_node(name)
    t.name = f"{topo.name} without switch {name}"
    return t.validate()


def fail_node(topo: Topology, gpu: str) -> Topology:
    """A copy of topo without GPU `gpu` (and a NIC that served only it); the job continues on one rank fewer."""
    if gpu not in topo.graph or topo.graph.nodes[gpu].get("kind") != "gpu":
        raise HcfError(f"cannot fail node {gpu!r}: no such GPU in {topo.name}")
    t = topo.copy()
    nics = [n for n in t.graph.neighbors(gpu) if t.graph.nodes[n].get("kind") == "nic"
            and sum(t.graph.nodes[m].get("kind") == "gpu" for m in t.graph.neighbors(n)) == 1]
    t.graph.remove_nodes_from([gpu, *nics])
    t.name = f"{topo.name} without {gpu}"
    return t.validate()


def apply_fault(topo: Topology, kind: str, target: str) -> Topology:
    """Apply a fault given as kind ('link' with target 'u,v' | 'switch' | 'node') and a target name."""
    if kind == "link":
        parts = [x.strip() for x in target.replace("-", ",").split(",")]
        if len(parts) != 2:
            raise HcfError(f"a link fault needs 'U,V', got {target!r}")
        return fail_link(topo, *parts)
    if kind == "switch":
        return fail_switch(topo, target)
    if kind == "node":
        return fail_node(topo, target)
    raise HcfError(f"unknown fault kind {kind!r}; choose one of {', '.join(FAULT_KINDS)}")


@dataclass(frozen=True)
class Recovery:
    """Expected time lost to one node failure under periodic checkpoints (Young's first-order model)."""

    checkpoint_interval: float
    lost_work: float
    restart: float
    total: float
    optimal_interval: float | None
    overhead_fraction: float | None


def recovery_time(interval_s: float, write_s: float, restart_s: float, mtbf_s: float | None = None) -> Recovery:
    """Lost work is half an interval on average, plus restart (reschedule + load checkpoint); Young: T* = sqrt(2 C M)."""
    require_positive("checkpoint interval", interval_s, "s")
    require_nonnegative("checkpoint write time", write_s)
    require_nonnegative("restart time", restart_s)
    lost = interval_s / 2
    opt = over = None
    if mtbf_s is not None:
        require_positive("MTBF", mtbf_s, "s")
        opt = math.sqrt(2 * write_s * mtbf_s)
        over = write_s / interval_s + (lost + restart_s) / mtbf_s
    return Recovery(interval_s, lost, restart_s, lost + restart_s, opt, over)


@dataclass
class FaultReport:
    """Before/after of one fault: times, slowdown, routes that moved, the re-planned algorithm."""

    fault: str
    before: CommResult
    after: CommResult
    slowdown: float
    rerouted_pairs: int
    pairs_checked: int
    replanned: str
    recovery: Recovery | None = None

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        d = asdict(self)
        d["before"], d["after"] = self.before.to_dict(), self.after.to_dict()
        return d


def fault_scenario(topo: Topology, kind: str, target: str, collective: str, size: float,
                   algorithm: str = "auto", method: str = "flow", checkpoint: tuple[float, float, float] | None = None,
                   mtbf_s: float | None = None) -> FaultReport:
    """Simulate the collective, apply the fault, reroute and re-plan, and simulate again."""
    before = simulate(topo, collective, size, algorithm, method)
    broken = apply_fault(topo, kind, target)
    p_after = len(broken.gpus)
    note = f"kept {before.algorithm}"
    if algorithm == "auto":
        # re-plan by simulating every candidate on the broken fabric: congestion the formulas miss counts
        group = broken.group_size if broken.group_size > 1 and p_after % broken.group_size == 0 else 1
        runs = [simulate(broken, collective, size, a, method) for a in candidates(collective, p_after, group)]
        after = min(runs, key=lambda r: r.time)
    else:
        try:
            after = simulate(broken, collective, size, algorithm, method)
        except HcfError:  # e.g. servers are no longer whole, so the 2D plan is impossible
            after = simulate(broken, collective, size, "auto", method)
    if after.algorithm != before.algorithm:
        note = f"re-planned {before.algorithm} -> {after.algorithm}"
    moved = checked = 0
    if kind != "node":  # same ranks: compare the routes the algorithm actually uses
        r0, r1 = Router(topo), Router(broken)
        pairs = {(int(a), int(b)) for ph in phases(collective, before.algorithm, before.ranks, size,
                                                  topo.group_size) for a, b in zip(ph.src, ph.dst, strict=True)}
        for a, b in sorted(pairs)[:20000]:
            checked += 1
            moved += r0.path_nodes(a, b) != r1.path_nodes(a, b)
    rec = None
    if kind == "node" and checkpoint:
        rec = recovery_time(*checkpoint, mtbf_s=mtbf_s)
    return FaultReport(f"{kind} {target}", before, after, after.time / before.time if before.time else 1.0,
                       moved, checked, note, rec)
