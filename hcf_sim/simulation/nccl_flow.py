"""One model behind every view: NCCL's tuner picks (algorithm, protocol) on a topology, the flow
simulator times the pick's traffic, in-switch reduction (NVLS, SHARP) included.

The machine description NCCL's cost model needs (GPUs per node, NVLink and NIC rates, NVSwitch,
SHARP) is read off the topology (`fabric`), so `uol hcf predict --cluster dgx-h100` and
`uol hcf simulate --topology rail` describe the same machine with the same numbers. Each
algorithm's traffic is a set of concurrent flows sized so that, on links nobody else uses, the
flows drain in exactly NCCL's bandwidth term; what the flow model adds is sharing: hash
collisions, oversubscribed uplinks, failed links. Latencies are NCCL's (nccl_model.latency_us).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from hcf_sim.collectives import nccl_model as nm
from hcf_sim.errors import HcfError, human_bytes
from hcf_sim.fabric.links import PRESETS
from hcf_sim.fabric.topology import Topology
from hcf_sim.simulation.flowsim import Router, drain
from hcf_sim.simulation.timing import phase

INTRA_PRESETS = ("nvlink", "pcie")  # links inside a server; anything else (or a NIC) is network


@dataclass(frozen=True)
class Fabric:
    """The NCCL model's cluster plus where its switches reduce: NVSwitch per node, SHARP switch per rank."""

    cluster: nm.Cluster
    nvswitch: tuple[str, ...]  # per node, the NVLink switch that reduces (NVLS); empty without
    sharp_switch: tuple[str, ...]  # per rank, its first InfiniBand switch that reduces; empty without
    channels: int  # rings NCCL runs side by side across nodes: one per NIC


def _links(topo: Topology, a: str, b: str) -> list[dict]:
    path = nx.bidirectional_shortest_path(topo.graph, a, b)
    return [topo.graph.edges[u, v] | {"_nodes": (u, v)} for u, v in itertools.pairwise(path)]


def _is_intra(topo: Topology, links: list[dict]) -> bool:
    kinds = {topo.graph.nodes[n].get("kind") for e in links for n in e["_nodes"]}
    return "nic" not in kinds and all(str(e["preset"]).startswith(INTRA_PRESETS) for e in links)


def _common_switch(topo: Topology, gpus: list[str], prefix: str) -> str | None:
    g = topo.graph
    common = None
    for gpu in gpus:
        sw = {n for n in g.neighbors(gpu) if g.nodes[n].get("kind") == "switch"
              and str(g.edges[gpu, n]["preset"]).startswith(prefix)}
        common = sw if common is None else common & sw
    return min(common) if common else None


def _sharp_switch(topo: Topology, gpu: str) -> str | None:
    near = nx.single_source_shortest_path_length(topo.graph, gpu, cutoff=3)
    found = [(d, n) for n, d in near.items() if topo.graph.nodes[n].get("sharp")]
    return min(found)[1] if found else None


def unfit(topo: Topology, ranks: int) -> str | None:
    """Why NCCL's model cannot describe these ranks (servers not whole), or None when it can."""
    g = topo.group_size
    if ranks > 1 and 1 < g < ranks and ranks % g:
        return (f"{ranks} ranks do not fill whole servers of {g} GPUs: NCCL's cost model needs "
                "equal servers, so the textbook schedules are compared flow by flow instead")
    return None


def fabric(topo: Topology, ranks: int | None = None) -> Fabric:
    """What NCCL would see on the first `ranks` GPUs of this topology (every number from its links)."""
    gpus = topo.gpus
    p = ranks or len(gpus)
    if p < 2:
        raise HcfError("the NCCL model needs at least 2 ranks")
    mapping = nm.constants()["topology_mapping"]
    g = topo.group_size
    if g <= 1:  # GPUs wired to each other directly (torus, ring, full mesh) are one NCCL node
        g = p if _is_intra(topo, _links(topo, gpus[0], gpus[1])) else 1
    g = min(g, p)
    if p % g:
        raise HcfError(f"{p} ranks do not fill whole servers of {g} GPUs on {topo.name}")
    nodes = p // g
    intra = _links(topo, gpus[0], gpus[1]) if g > 1 else []
    inter = _links(topo, gpus[0], gpus[g]) if nodes > 1 else []
    presets = [str(e["preset"]) for e in intra or inter]
    gen = next((mapping["generation_of_link"][x] for x in presets
                if x in mapping["generation_of_link"]), mapping["default_generation"]["value"])
    nic = min(e["bandwidth"] for e in inter) / 1e9 if inter else 0.0
    intra_bw = min(e["bandwidth"] for e in intra) / 1e9 if intra else nic
    gn = topo.graph.nodes
    nics = len({n for gpu in gpus[:g] for n in topo.graph.neighbors(gpu) if gn[n].get("kind") == "nic"})
    nics = max(1, nics)
    if not inter:  # one node: the NIC's rate still describes the machine (unused by its costs)
        G = topo.graph
        nic = min((min(G.edges[gpus[0], n]["bandwidth"], *(G.edges[n, m]["bandwidth"] for m in G.neighbors(n)))
                   / 1e9 for n in G.neighbors(gpus[0]) if gn[n].get("kind") == "nic"), default=0.0)
    prefix = mapping["nvls_link_prefix"]["value"]
    nvs = tuple(_common_switch(topo, gpus[k * g:(k + 1) * g], prefix) for k in range(nodes)) \
        if g > 1 else ()
    nvls = bool(nvs) and all(nvs) and gen in nm.constants()["nccl_tuning"]["nvls_efficiency"]
    any_sharp = any(d.get("sharp") for _, d in topo.graph.nodes(data=True))
    sharp_sw = tuple(_sharp_switch(topo, x) for x in gpus[:p]) if nodes > 1 and any_sharp else ()
    sharp = bool(sharp_sw) and all(sharp_sw)
    intra_hw = "nvlink" if all(x.startswith("nvlink") for x in presets) and intra else "pci"
    # what the network's NCCL plugin reports as its latency (EFA's 75 us; 0 for InfiniBand)
    net_latency = max((PRESETS[e["preset"]].plugin_latency_us for e in inter if e["preset"] in PRESETS), default=0.0)
    c = nm.Cluster(topo.name, g, nodes, intra_bw, nic, nics, nvls, sharp, gen,
                   mapping["cpu_vendor"]["value"], intra_hw if g > 1 else "nvlink", net_latency)
    return Fabric(c, nvs if nvls else (), sharp_sw if sharp else (), nics if nodes > 1 else 1)


@dataclass
class Tuned:
    """NCCL's pick for one question, timed by the flow model, with every candidate beside it."""

    algorithm: str
    protocol: str
    latency_us: float
    nccl_time_us: float  # NCCL's analytical cost (what `uol hcf predict` says)
    time_us: float  # flow-level: NCCL's latency + its bandwidth term stretched by link sharing + NVLS's steps
    congestion: float  # flow drain / NCCL's bandwidth term for the pick's traffic (1 = no sharing)
    candidates: dict[str, float] = field(default_factory=dict)  # "algo/proto" -> flow-level us
    link_bytes: dict[tuple[str, str], float] = field(default_factory=dict)  # the pick's traffic
    link_capacity: dict[tuple[str, str], float] = field(default_factory=dict)
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)


def _flows(router: Router, pairs: list[tuple[int, int]], nbytes: list[float], routing: str,
           to_switch: list[tuple[int, str, bool]] = (), sw_bytes: list[float] = (),
           load: np.ndarray | None = None, repeat: int = 1) -> float:
    """Drain time of GPU-to-GPU flows plus GPU<->switch flows (a switch that reduces ends a flow);
    adds the bytes each directed link carries (x repeat) to `load`."""
    routes, shares, sizes = [], [], list(nbytes)
    if routing == "spread":
        for a, b in pairs:
            r, w = router.spread(a, b)
            routes.append(r), shares.append(w)
    elif pairs:  # every GPU-to-GPU flow routed in one vectorised walk
        f, lk = router.routes(np.array([a for a, _ in pairs]), np.array([b for _, b in pairs]), routing)
        cuts = np.searchsorted(f, np.arange(1, len(pairs)))
        routes += np.split(lk, cuts)
        shares += [np.ones(len(r)) for r in routes]
    for (rank, sw, up), s in zip(to_switch, sw_bytes, strict=True):
        r = router.route_to_node(rank, sw, up)
        routes.append(r), shares.append(np.ones(len(r))), sizes.append(s)
    lens = np.array([len(r) for r in routes])
    flow_of = np.repeat(np.arange(len(routes)), lens)
    link_of, weight, sizes = np.concatenate(routes), np.concatenate(shares), np.array(sizes)
    if load is not None:
        np.add.at(load, link_of, sizes[flow_of] * weight * repeat)
    return drain(flow_of, link_of, weight, sizes, router.cap)


def _ring_order(c: int, g: int, nodes: int) -> list[int]:
    # channel c enters node k at local rank c (even k) and leaves on the next rail, snaking back on
    # odd nodes, so each node-to-node hop stays on one rail and the channels use different NICs
    out = []
    for k in range(nodes):
        local = [(c + j) % g for j in range(g)]
        out += [k * g + x for x in (local if k % 2 == 0 else [(c - 1 - j) % g for j in range(g)])]
    return out


def traffic_drain(fab: Fabric, router: Router, coll: str, algo: str, size: float, routing: str,
                  load: np.ndarray | None = None) -> float:
    """Seconds the algorithm's Simple-protocol traffic takes to drain on this fabric (flow level);
    the bytes it puts on each directed link are added to `load`."""
    c, t = fab.cluster, nm.constants()["nccl_tuning"]
    g, n, p = c.gpus_per_node, c.nodes, c.ranks
    steps = nm._nsteps(coll, p)
    if algo == "ring":
        nch = fab.channels
        pairs, sizes = [], []
        for ch in range(nch):
            order = _ring_order(ch, g, n) if n > 1 else list(range(p))
            pairs += [(order[i], order[(i + 1) % p]) for i in range(p)]
            sizes += [size / (p * nch)] * p
        return steps * _flows(router, pairs, sizes, routing, load=load, repeat=steps)
    sharp_eff = nm._v(t["collnet_direct_hopper_factor"])
    inter = [(r, fab.sharp_switch[r], up) for r in range(p) for up in (True, False)] if n > 1 and fab.sharp_switch else []
    inter_bytes = [size / g / sharp_eff] * len(inter)
    if algo == "nvls":
        eff = t["nvls_efficiency"][c.generation]
        local = [(r, fab.nvswitch[r // g], up) for r in range(p) for up in (True, False)]
        return _flows(router, [], [], routing, local + inter,
                      [size * (g + 1) / g / eff] * len(local) + inter_bytes, load)
    if algo == "nvls_tree":
        # NVLS in every node; GPU i of each node owns shard i and sends it up a binary tree of
        # nodes on its own rail, the result coming back down the same tree
        eff = t["nvls_efficiency"][c.generation]
        local = [(r, fab.nvswitch[r // g], up) for r in range(p) for up in (True, False)]
        pairs = [(child * g + i, parent * g + i)
                 for k in range(1, n) for child, parent in ((k, (k - 1) // 2),) for i in range(g)]
        pairs += [(b, a) for a, b in pairs]
        return _flows(router, pairs, [size / g] * len(pairs), routing, local,
                      [size * (g + 1) / g / eff] * len(local), load)
    if algo == "collnet_direct":
        pairs = [(k * g + i, k * g + (i + 1) % g) for k in range(n) for i in range(g)] if g > 1 else []
        return _flows(router, pairs, [size * 2 * (g - 1) / g] * len(pairs), routing, inter, inter_bytes, load)
    if algo == "collnet_chain":
        # each channel chains the node's GPUs to its head's NIC: the whole message goes up the
        # chain (reduced on the way) and the result comes back down it; the channels' heads spread
        # over the GPUs, so each GPU's NIC takes 1/g of the node's traffic to and from the switch
        up = [(k * g + i, k * g + i + 1) for k in range(n) for i in range(g - 1)]
        pairs = up + [(b, a) for a, b in up]
        return _flows(router, pairs, [size] * len(pairs), routing, inter, [size / g] * len(inter), load)
    if algo == "tree":
        f = nm._v(t["tree_busbw_factor"]) * nm._v(t["tree_algbw_ratio"])
        pairs = [(k * g + i, k * g + i + 1) for k in range(n) for i in range(g - 1)]
        sizes = [size / f] * len(pairs)
        for ch in range(fab.channels if n > 1 else 0):  # double binary tree over the nodes, per rail
            for mirror in (False, True):
                for k in range(1, n):
                    child, parent = (k, (k - 1) // 2) if not mirror else (n - 1 - k, n - 1 - (k - 1) // 2)
                    pairs.append((child * g + ch % g, parent * g + ch % g))
                    sizes.append(size / (2 * fab.channels * f))
        return _flows(router, pairs, sizes, routing, load=load) if pairs else 0.0
    raise HcfError(f"no traffic model for {algo}")


def tune(topo: Topology, collective: str, size: float, ranks: int | None = None, routing: str = "spread",
         method: str = "flow", router: Router | None = None, algorithm: str | None = None,
         protocol: str | None = None) -> Tuned:
    """NCCL's choice of (algorithm, protocol) here, by NCCL's own cost model, timed flow by flow.

    `algorithm` forces one of NCCL's algorithms (its best protocol), `protocol` one of its
    protocols (as NCCL_ALGO and NCCL_PROTO do). With method 'analytical' the time is NCCL's cost
    itself, which is what `uol hcf predict` prints.
    """
    with phase("NCCL machine description from the topology"):
        fab = fabric(topo, ranks)
    with phase("NCCL tuner: every (algorithm, protocol)"):
        choice = nm.select(fab.cluster, collective, size)
    coll = nm.canonical_collective(collective)
    cands = choice.candidates
    if algorithm:
        forced = [x for x in cands if x.algorithm == algorithm]
        if not forced:
            why = choice.excluded.get(algorithm) or next(
                (v for k, v in choice.excluded.items() if algorithm in k.split("/")), "not modelled")
            raise HcfError(f"{algorithm} cannot run {coll} on {topo.name}: {why}")
        cands = forced + [x for x in cands if x.algorithm != algorithm]
    if protocol:
        if protocol not in nm.PROTOCOLS:
            raise HcfError(f"protocol {protocol!r}: NCCL's are {', '.join(nm.PROTOCOLS)}")
        pick = next((x for x in cands if x.protocol == protocol and algorithm in (None, x.algorithm)), None)
        if pick is None:
            raise HcfError(f"{algorithm or 'no algorithm'} can run {coll} with {protocol} on {topo.name}")
        cands = [pick] + [x for x in cands if x is not pick]
    best = cands[0]
    stretch: dict[str, float] = {}
    links: dict[tuple[str, str], float] = {}
    if method == "flow":
        if router is None:
            with phase("routing table"):
                router = Router(topo)
        for algo in dict.fromkeys(x.algorithm for x in cands):
            simple = next(x for x in cands if x.algorithm == algo and x.protocol == "Simple")
            ideal = size / (simple.algbw_gbps * 1e9)
            load = np.zeros(len(router.links))
            # NCCL's bandwidths are what its channels reach on free links (measured rates), so
            # link sharing can only slow a pick down: spare capacity does not speed NCCL up
            with phase(f"flow: {algo} traffic"):
                got = traffic_drain(fab, router, coll, algo, size, routing, load) / ideal if ideal else 1.0
            stretch[algo] = max(1.0, got)
            if algo == best.algorithm:
                links = {router.links[i]: float(load[i]) for i in np.flatnonzero(load)}
                caps = {router.links[i]: float(router.cap[i]) for i in np.flatnonzero(load)}
    # NVLS's loop steps cost time NCCL's tuner does not rank with (nm.nvls_step_us): the time has it
    flow = {f"{x.algorithm}/{x.protocol}": x.latency_us + (x.time_us - x.latency_us) * stretch.get(x.algorithm, 1.0)
            + nm.nvls_step_us(fab.cluster, coll, x.algorithm, size) for x in cands}
    key = f"{best.algorithm}/{best.protocol}"
    notes = []
    k = stretch.get(best.algorithm, 1.0)
    steps_us = nm.nvls_step_us(fab.cluster, coll, best.algorithm, size) if method == "flow" else 0.0
    if steps_us:
        chunk, steps = nm.nvls_steps(fab.cluster, coll, best.algorithm, size)
        notes.append(f"flow-level {flow[key]:,.2f} us vs NCCL's analytical {best.time_us:,.2f} us: NVLS runs "
                     f"{steps} loop step{'s' if steps > 1 else ''} of {human_bytes(chunk)} chunks per channel "
                     f"(NCCL's enqueue.cc), {steps_us:,.2f} us that NCCL's tuner ranks without")
    if k > 1.02:
        notes.append(f"flow-level {flow[key]:,.2f} us vs NCCL's analytical {best.time_us:,.2f} us "
                     f"({flow[key] / best.time_us - 1:+.0%}): NCCL's cost assumes no shared links; "
                     f"the flow model finds the pick's traffic {k:.2f}x as long on this fabric")
    fastest = min(flow, key=flow.get)
    if flow[fastest] < flow[key] * 0.95 and not (algorithm or protocol):
        notes.append(f"on this fabric {fastest} would be faster by the flow model ({flow[fastest]:,.2f} us); "
                     "NCCL's tuner does not see congestion, so it picks as shown")
    who = "forced" if algorithm or protocol else "NCCL's tuner picks"
    why = choice.reason.split(": ", 1)[1] if not (algorithm or protocol) else (
        f"{best.time_us:.2f} us = {best.latency_us:.2f} us latency + {best.time_us - best.latency_us:.2f} us "
        f"at {best.algbw_gbps:.1f} GB/s; NCCL's own pick is {choice.best.algorithm}/{choice.best.protocol} "
        f"({choice.best.time_us:.2f} us)")
    reason = (f"{who} {key} for {human_bytes(size)} on {fab.cluster.ranks} GPUs "
              f"({fab.cluster.nodes} node{'s' if fab.cluster.nodes > 1 else ''}"
              f"{', NVLS' if fab.cluster.nvls else ''}{', SHARP' if fab.cluster.sharp else ''}) "
              f"by NCCL's cost model: " + why)
    if method == "flow":
        reason += f"; flow-level {flow[key]:.2f} us"
    return Tuned(best.algorithm, best.protocol, best.latency_us, best.time_us,
                 flow[key] if method == "flow" else best.time_us, k, flow, links, caps if links else {},
                 reason, notes, choice.excluded)
