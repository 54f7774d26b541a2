"""Faults: fail a link, switch or node, reroute, re-plan the collective, report slowdown and recovery time."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import cache

import numpy as np

from hcf_sim.collectives.analytical import ALGORITHMS, canonical_collective
from hcf_sim.errors import HcfError, require_nonnegative, require_positive
from hcf_sim.fabric.topology import Topology
from hcf_sim.service import CommResult, compare, simulate, tuned
from hcf_sim.simulation.flowsim import Router
from hcf_sim.simulation.schedules import phases

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


class FaultRouter(Router):
    """Routes on a fabric with a failed link or switch, as switches repair them: each switch drops
    the dead next hop from its equal-cost group and splits over the survivors (the flow's other
    routes are untouched); a flow left with no surviving equal-cost route takes one detour.

    Recomputing every route from scratch would let a fault hand flows a wider or luckier spread
    than the intact fabric gave them, and a fault would seem to speed the collective up.
    """

    def __init__(self, broken: Topology, before: Router, protocol: str = "Simple") -> None:
        super().__init__(broken, protocol)
        self.before = before

    def spread(self, src_rank: int, dst_rank: int) -> tuple[np.ndarray, np.ndarray]:
        """The pre-fault split, minus dead hops, re-split over the surviving ones."""
        key = (src_rank, dst_rank, "spread")
        if key in self._cache:
            return self._cache[key]
        old = self.before
        s, d = int(old.gpu_idx[src_rank]), int(old.gpu_idx[dst_rank])
        row = old.dist[old.dst_row[d]]

        def hops(u: int) -> list[int]:
            nb = old.nbrs[u]
            return [int(v) for v in nb[row[nb] == row[u] - 1]
                    if (self.index.get(old.nodes[u], -1), self.index.get(old.nodes[int(v)], -1))
                    in self.link_id]

        @cache
        def reaches(u: int) -> bool:
            return u == d or any(reaches(v) for v in hops(u))

        if not reaches(s):
            ids = self.route(src_rank, dst_rank, "shortest")
            out = (ids, np.ones(len(ids)))
        else:
            share: dict[int, float] = {}
            level = {s: 1.0}
            while d not in level:
                nxt: dict[int, float] = {}
                for u, f in level.items():
                    alive = [v for v in hops(u) if reaches(v)]
                    for v in alive:
                        lid = self.link_id[(self.index[old.nodes[u]], self.index[old.nodes[v]])]
                        share[lid] = share.get(lid, 0.0) + f / len(alive)
                        nxt[v] = nxt.get(v, 0.0) + f / len(alive)
                level = nxt
            out = (np.fromiter(share, dtype=np.int64, count=len(share)),
                   np.fromiter(share.values(), dtype=float, count=len(share)))
        self._cache[key] = out
        return out


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
    """Before/after of one fault: times, slowdown, routes that moved, the re-planned algorithm.

    outcome is 'slower' or 'unchanged' when the collective survives on the same ranks (after is
    then never faster than before), or 'failed' when a rank is lost: the communicator aborts, and
    `after` is the job restarted on the ranks left (a different job, so no slowdown is claimed).
    """

    fault: str
    before: CommResult
    after: CommResult
    slowdown: float
    rerouted_pairs: int
    pairs_checked: int
    replanned: str
    recovery: Recovery | None = None
    outcome: str = "slower"

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        d = asdict(self)
        d["before"], d["after"] = self.before.to_dict(), self.after.to_dict()
        return d


def _run(topo: Topology, collective: str, size: float, algorithm: str, method: str,
         router: Router | None, routing: str, top_links: int = 10, nccl: bool = False) -> CommResult:
    if algorithm == "auto":
        return compare(topo, collective, size, method, routing=routing, router=router, top_links=top_links)[0]
    if nccl:  # NCCL's pick re-run on other routes: NCCL's algorithm, not the textbook namesake
        return tuned(topo, collective, size, algorithm, method, routing, None, router, top_links)
    return simulate(topo, collective, size, algorithm, method, routing=routing, router=router, top_links=top_links)


def _links_used(router: Router, a: int, b: int, routing: str) -> set[tuple[str, str]]:
    ids = router.spread(a, b)[0] if routing == "spread" else router.route(a, b, routing)
    return {router.links[i] for i in ids}


def fault_scenario(topo: Topology, kind: str, target: str, collective: str, size: float,
                   algorithm: str = "auto", method: str = "flow", checkpoint: tuple[float, float, float] | None = None,
                   mtbf_s: float | None = None, routing: str = "spread", top_links: int = 10) -> FaultReport:
    """Simulate the collective, apply the fault, reroute and re-plan, and simulate again.

    A link or switch fault is always simulated flow by flow (an analytical alpha-beta cannot see
    which link went down), by default with flows spread over equal-cost paths, so a fault only
    takes routes away; re-planning ('auto') picks the fastest on the broken fabric by the same
    method as before, and a fixed algorithm that is no longer possible fails over to 'auto'.
    """
    broken = apply_fault(topo, kind, target)
    if kind == "node":
        before = _run(topo, collective, size, algorithm, method, None, routing, top_links)
        try:
            after = _run(broken, collective, size, algorithm, method, None, routing, top_links)
        except HcfError:  # e.g. a 2D plan whose servers are no longer whole
            after = _run(broken, collective, size, "auto", method, None, routing, top_links)
        rec = recovery_time(*checkpoint, mtbf_s=mtbf_s) if checkpoint else None
        note = (f"rank {target} lost: the collective fails; the job restarts on {after.ranks} ranks "
                f"with {after.algorithm}")
        return FaultReport(f"{kind} {target}", before, after, after.time / before.time if before.time else 1.0,
                           0, 0, note, rec, "failed")
    method = "flow"
    r0 = Router(topo)
    r1 = FaultRouter(broken, r0) if routing == "spread" else Router(broken)
    before = _run(topo, collective, size, algorithm, method, r0, routing, top_links)
    try:
        after = _run(broken, collective, size, algorithm, method, r1, routing, top_links)
        note = f"kept {before.algorithm}"
    except HcfError:  # e.g. servers are no longer whole, so the 2D plan is impossible
        after = _run(broken, collective, size, "auto", method, r1, routing, top_links)
        note = f"{algorithm} is no longer possible"
    if after.time < before.time:
        # Every route of the repaired fabric exists on the intact one too, so the intact fabric
        # could run the collective this way: even splitting is not the best split (Braess)
        shown = before.time
        before = _run(topo, collective, size, before.algorithm, method, r1, routing, top_links,
                      before.model.startswith("NCCL"))
        before.notes.append(f"routed as after the fault: {before.time * 1e6:.2f} us beats the even "
                            f"equal-cost split ({shown * 1e6:.2f} us); the intact fabric has these routes too")
        note += "; the repaired routes are also the intact fabric's best, so the fault costs nothing"
    if after.algorithm != before.algorithm:
        note = f"re-planned {before.algorithm} -> {after.algorithm}"
    moved = checked = 0
    # NCCL's own algorithms (nvls, collnet) have no textbook schedule: count the ring's rank pairs
    sched = before.algorithm if before.algorithm in ALGORITHMS.get(canonical_collective(collective), ()) \
        else "ring"
    pairs = {(int(a), int(b)) for ph in phases(collective, sched, before.ranks, size,
                                              topo.group_size) for a, b in zip(ph.src, ph.dst, strict=True)}
    for a, b in sorted(pairs)[:20000]:
        checked += 1
        moved += _links_used(r0, a, b, routing) != _links_used(r1, a, b, routing)
    slowdown = after.time / before.time if before.time else 1.0
    return FaultReport(f"{kind} {target}", before, after, slowdown, moved, checked, note, None,
                       "slower" if slowdown > 1 + 1e-9 else "unchanged")
