"""Service functions the CLI and the IDE call: simulate one collective, sweep sizes, derive alpha-beta from a topology."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import networkx as nx

from hcf_sim.collectives.analytical import (
    AlphaBeta,
    algbw,
    analytical_cost,
    busbw,
    canonical_collective,
    check_collective,
)
from hcf_sim.collectives.nccl_model import MODELLED
from hcf_sim.collectives.selector import candidates
from hcf_sim.errors import MAX_FLOW_RANKS, HcfError, check_ranks, check_size, human_bytes
from hcf_sim.fabric.links import get_protocol
from hcf_sim.fabric.topology import Topology
from hcf_sim.simulation.flowsim import Router, flow_simulate
from hcf_sim.simulation.nccl_flow import tune, unfit
from hcf_sim.simulation.timing import phase


@dataclass
class CommResult:
    """One simulated collective: time, nccl-tests algbw/busbw, cost terms and the busiest links."""

    collective: str
    algorithm: str
    method: str
    ranks: int
    size: float
    time: float
    algbw: float
    busbw: float
    terms: dict | None = None
    link_load: list[dict] = field(default_factory=list)
    max_link_utilisation: float = 0.0
    bus_utilisation: float = 0.0  # busbw / achievable bandwidth of the bottleneck link
    selection: str | None = None
    notes: list[str] = field(default_factory=list)
    # every candidate's time (s) at this size by the same method: the numbers 'auto' chose from
    alternatives: dict[str, float] = field(default_factory=dict)
    protocol: str = "Simple"
    # which model gave the time and why that one: every view prints it beside the number
    model: str = "flow-level (routes, max-min link sharing), MPI-style algorithm"

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return asdict(self)


def path_params(router: Router, a: int, b: int, protocol: str, gamma: float = 0.0,
                routing: str = "ecmp") -> AlphaBeta:
    """Alpha-beta of the route between ranks a and b: step latency + propagation, slowest link's bandwidth."""
    r = router.route(a, b, routing)
    eff = get_protocol(protocol).efficiency
    alpha = float(router.step[r].max() + router.lat[r].sum())
    return AlphaBeta(alpha, 1.0 / (float(router.cap[r].min()) * eff), gamma)


def _nx_params(topo: Topology, a: str, b: str, protocol: str, gamma: float) -> AlphaBeta:
    # one bidirectional BFS: cheap enough for the analytical path (no all-pairs router needed)
    path = nx.bidirectional_shortest_path(topo.graph, a, b)
    edges = [topo.graph.edges[u, v] for u, v in itertools.pairwise(path)]
    eff = get_protocol(protocol).efficiency
    alpha = max(e["step_latency"][protocol] for e in edges) + sum(e["latency"] for e in edges)
    return AlphaBeta(alpha, 1.0 / (min(e["bandwidth"] for e in edges) * eff), gamma)


def topology_params(topo: Topology, protocol: str = "Simple", gamma: float = 0.0,
                    ranks: int | None = None) -> tuple[AlphaBeta, AlphaBeta, int]:
    """(intra, inter, group): intra is rank 0 to 1 inside a server, inter is rank 0 to the next server (or rank 1)."""
    get_protocol(protocol)
    gpus = topo.gpus
    p = ranks or len(gpus)
    if p < 2:
        ab = AlphaBeta(0.0, 1e-12, gamma)
        return ab, ab, 1
    g = topo.group_size if topo.group_size > 1 and p % topo.group_size == 0 else 1
    intra = _nx_params(topo, gpus[0], gpus[1], protocol, gamma) if g > 1 else None
    inter = _nx_params(topo, gpus[0], gpus[g if p > g else 1], protocol, gamma)
    return intra or inter, inter, g


def simulate(topo: Topology, collective: str, size: float, algorithm: str = "auto", method: str = "flow",
             protocol: str = "Simple", routing: str = "ecmp", ranks: int | None = None, gamma: float = 0.0,
             top_links: int = 10, router: Router | None = None) -> CommResult:
    """Simulate one collective on a topology, analytically or flow-by-flow.

    'auto' (and NCCL's own algorithms, nvls, nvls_tree, collnet_direct and collnet_chain) go through NCCL's tuner: the
    (algorithm, protocol) NCCL would pick, timed by the flow model (`hcf_sim.simulation.nccl_flow`), so
    this, `predict`, `sweep`, `pipeline` and the IDE give one answer. A named MPI-style
    algorithm (ring, tree, rabenseifner, ...) is timed as that textbook schedule.
    """
    collective = canonical_collective(collective)
    check_size(size)
    p = check_ranks(ranks or len(topo.gpus))
    if p > len(topo.gpus):
        raise HcfError(f"{p} ranks asked but topology {topo.name} has only {len(topo.gpus)} GPUs")
    if collective in MODELLED and p > 1 and algorithm in NCCL_ONLY:
        return tuned(topo, collective, size, algorithm, method, routing, p, router, top_links)
    if collective in MODELLED and p > 1 and algorithm == "auto" and not unfit(topo, p):
        return tuned(topo, collective, size, None, method, routing, p, router, top_links)
    check_collective(collective, None if algorithm == "auto" else algorithm)
    if method not in ("flow", "analytical"):
        raise HcfError(f"method must be 'flow' or 'analytical', got {method!r}")
    if method == "flow" and p > MAX_FLOW_RANKS:
        raise HcfError(f"flow-level simulation is limited to {MAX_FLOW_RANKS} ranks; use --method analytical")
    intra, inter, group = topology_params(topo, protocol, gamma, p)
    if algorithm == "auto":
        # one model answers both questions: the winner is the fastest by the very method that
        # times it, so the headline and the comparison can never disagree
        return compare(topo, collective, size, method, protocol, routing, p, gamma, top_links, router)[0]
    if algorithm == "hierarchical" and group == 1:
        raise HcfError(f"hierarchical needs a topology with servers of >1 GPU (rail) and whole servers; "
                       f"{topo.name} has group size {topo.group_size} and {p} ranks")
    terms = analytical_cost(collective, algorithm, p, size, intra, inter, group)
    notes: list[str] = []
    if method == "analytical":
        t = terms.total
        loads: list[dict] = []
        util = 0.0
    else:
        if router is None:
            with phase("routing table"):
                router = Router(topo, protocol)
        with phase(f"flow: {algorithm}"):
            run = flow_simulate(topo, collective, algorithm, size, p, protocol, routing, gamma, router)
        t = run.time
        ranked = sorted(run.link_bytes, key=run.link_bytes.get, reverse=True)
        loads = [{"link": f"{u}->{v}", "bytes": run.link_bytes[(u, v)],
                  "utilisation": run.link_bytes[(u, v)] / (run.link_capacity[(u, v)] * t) if t else 0.0}
                 for u, v in ranked[:top_links]]
        util = max((x["utilisation"] for x in loads), default=0.0)
        if terms.total > 0 and abs(t - terms.total) / terms.total > 0.05:
            notes.append(f"flow-level differs from analytical ({terms.total * 1e6:.2f} us) by "
                         f"{(t - terms.total) / terms.total:+.0%}: multi-hop routes or shared links")
    bus = busbw(collective, p, size, t) if t else 0.0
    return CommResult(collective, algorithm, method, p, size, t, algbw(size, t) if t else 0.0, bus,
                      {"latency": terms.latency, "bandwidth": terms.bandwidth, "reduction": terms.reduction,
                       "steps": terms.steps, "total": terms.total},
                      loads, util, bus * inter.beta if t else 0.0, None, notes,
                      model=f"{'flow-level (routes, max-min link sharing)' if method == 'flow' else 'alpha-beta'}"
                            f", textbook {algorithm} schedule with {protocol} (not NCCL's tuner)")


NCCL_ONLY = ("nvls", "nvls_tree", "collnet_direct", "collnet_chain")  # NCCL's in-switch reductions: no MPI-style schedule


def tuned(topo: Topology, collective: str, size: float, algorithm: str | None = None,
          method: str = "flow", routing: str = "spread", ranks: int | None = None,
          router: Router | None = None, top_links: int = 10, protocol: str | None = None) -> CommResult:
    """NCCL's pick (or `algorithm`, one of NCCL's, and `protocol`, one of its protocols) timed by
    the flow model, as a CommResult."""

    p = check_ranks(ranks or len(topo.gpus))
    flow = method == "flow" and p <= MAX_FLOW_RANKS
    if flow and router is None:
        with phase("routing table"):
            router = Router(topo)
    t = tune(topo, collective, size, p, routing, "flow" if flow else "analytical", router, algorithm, protocol)
    secs = t.time_us * 1e-6
    model = ("NCCL's tuner picks (NCCL's cost model, nccl_constants.json); "
             + ("timed flow by flow: NCCL's latency + its bandwidth term stretched by shared links"
                if flow else "NCCL's analytical cost, as `uol hcf predict`"
                + (f" (over the flow model's {MAX_FLOW_RANKS} ranks)" if method == "flow" else "")))
    bw = (t.nccl_time_us - t.latency_us) * 1e-6
    ranked = sorted(t.link_bytes, key=t.link_bytes.get, reverse=True)
    loads = [{"link": f"{u}->{v}", "bytes": t.link_bytes[(u, v)],
              "utilisation": t.link_bytes[(u, v)] / (t.link_capacity[(u, v)] * secs) if secs else 0.0}
             for u, v in ranked[:top_links]]
    res = CommResult(collective, t.algorithm, "flow" if flow else "analytical", p, size, secs,
                     algbw(size, secs), busbw(collective, p, size, secs),
                     {"latency": t.latency_us * 1e-6, "bandwidth": bw * t.congestion, "reduction": 0.0,
                      "steps": 0, "total": secs, "nccl_time": t.nccl_time_us * 1e-6,
                      "congestion": t.congestion},
                     link_load=loads, max_link_utilisation=max((x["utilisation"] for x in loads), default=0.0),
                     selection=t.reason, notes=list(t.notes),
                     alternatives={k: v * 1e-6 for k, v in t.candidates.items()},
                     protocol=t.protocol, model=model)
    return res


def compare(topo: Topology, collective: str, size: float, method: str = "flow", protocol: str = "Simple",
            routing: str = "ecmp", ranks: int | None = None, gamma: float = 0.0, top_links: int = 10,
            router: Router | None = None) -> list[CommResult]:
    """Every candidate algorithm simulated by one method, fastest first; the first says why it wins.

    Each result carries all candidates' times (`alternatives`), so a page can show the comparison
    beside the headline from the very numbers the choice was made on.
    """
    collective = canonical_collective(collective)
    check_collective(collective)
    p = check_ranks(ranks or len(topo.gpus))
    _, _, group = topology_params(topo, protocol, gamma, p)
    if method == "flow" and router is None and p <= MAX_FLOW_RANKS:
        with phase("routing table"):
            router = Router(topo, protocol)  # one routing table for every candidate
    why_not = unfit(topo, p) if collective in MODELLED else None
    if collective in MODELLED and p > 1 and not why_not:
        # NCCL's candidates, chosen as its tuner does; `alternatives` holds each one's time
        return [tuned(topo, collective, size, None, method, routing, p, router, top_links)]
    runs = [simulate(topo, collective, size, a, method, protocol, routing, p, gamma, top_links, router)
            for a in candidates(collective, p, group)]
    runs.sort(key=lambda r: r.time)
    times = {r.algorithm: r.time for r in runs}
    for r in runs:
        r.alternatives = dict(times)
    best = runs[0]
    reason = (f"{best.algorithm} is fastest by the {method} model for {human_bytes(size)} on {p} ranks: "
              f"{best.time * 1e6:.2f} us")
    if best.terms and method == "analytical":
        c = best.terms
        reason += (f" = {c['latency'] * 1e6:.2f} us latency ({c['steps']} steps) + "
                   f"{c['bandwidth'] * 1e6:.2f} us bandwidth"
                   + (f" + {c['reduction'] * 1e6:.2f} us reduction" if c["reduction"] else ""))
    if len(runs) > 1:
        reason += f"; runner-up {runs[1].algorithm} takes {runs[1].time / best.time:.2f}x as long" \
            if best.time else f"; runner-up {runs[1].algorithm}"
    best.selection = reason
    if why_not:
        best.notes.append(why_not)
    return runs


def sweep(topo: Topology, collective: str, sizes: list[int], algorithms: list[str], method: str = "analytical",
          protocol: str = "Simple", routing: str = "ecmp", ranks: int | None = None,
          progress: Callable[[int], None] | None = None) -> list[CommResult]:
    """Simulate every (algorithm, size) pair; calls progress(1) after each so a CLI can draw a bar."""
    router = Router(topo, protocol) if method == "flow" else None
    out = []
    for a in algorithms:
        for s in sizes:
            out.append(simulate(topo, collective, s, a, method, protocol, routing, ranks, router=router))
            if progress:
                progress(1)
    return out
