"""NCCL-style cost model: ring and tree with LL / LL128 / Simple, NVLS (NVSwitch reduction) and
CollNet/SHARP (InfiniBand switch reduction), with NCCL's own public tuning constants.

Every constant lives in nccl_constants.json beside its source. Latencies follow NCCL's
ncclTopoTuneModel formulas. Bandwidths start from the cluster's effective per-GPU link rates
and apply NCCL's protocol factors; NVLS and SHARP get a traffic model of their own (below),
because NCCL's ranking formula for NVLS is not meant to match measured bandwidth.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

from hcf_sim.collectives.analytical import canonical_collective
from hcf_sim.errors import HcfError, check_ranks, check_size, human_bytes

PROTOCOLS = ("LL", "LL128", "Simple")
MODELLED = ("allreduce", "allgather", "reducescatter")


@cache
def constants() -> dict:
    """The constants file (NCCL tuning tables, cluster presets, ASTRA-sim and published figures)."""
    return json.loads((Path(__file__).with_name("nccl_constants.json")).read_text())


def _v(entry: dict | float) -> float:
    return entry["value"] if isinstance(entry, dict) else entry


@dataclass(frozen=True)
class Cluster:
    """What the model needs to know about a machine: GPUs per node, link rates, in-network reduction."""

    name: str
    gpus_per_node: int
    nodes: int
    intra_busbw: float  # GB/s, effective per-GPU intra-node bandwidth (nccl-tests ring busbw)
    nic_gbps: float  # GB/s per NIC, effective
    nics_per_node: int
    nvls: bool  # NVSwitch multicast/reduction (NVLink SHARP)
    sharp: bool  # InfiniBand switches reduce (NCCL CollNet)
    generation: str = "hopper"
    cpu_vendor: str = "intel"
    intra_hw: str = "nvlink"
    net_latency_us: float = 0.0  # the network plugin's reported latency (NCCL's graph->latencyInter)

    @property
    def ranks(self) -> int:
        """GPUs in the whole cluster."""
        return self.gpus_per_node * self.nodes


def cluster(name: str, nodes: int = 1) -> Cluster:
    """A cluster preset from nccl_constants.json (dgx-h100, dgx-h100-sharp) with `nodes` nodes."""
    presets = constants()["clusters"]
    if name not in presets:
        raise HcfError(f"unknown cluster {name!r}; choose one of {', '.join(presets)}")
    c = presets[name]
    check_ranks(nodes)
    return Cluster(name, c["gpus_per_node"], nodes, _v(c["intra_busbw_gbps"]), _v(c["nic_gbps"]),
                   c["nics_per_node"], c["nvls"], c["sharp"], c["generation"], c["cpu_vendor"],
                   c["intra_hw"])


@dataclass(frozen=True)
class Candidate:
    """One (algorithm, protocol): latency us, algorithm bandwidth GB/s, time us."""

    algorithm: str
    protocol: str
    latency_us: float
    algbw_gbps: float
    time_us: float


@dataclass(frozen=True)
class Choice:
    """The fastest candidate, all candidates, why, and what was left out and why."""

    best: Candidate
    candidates: list[Candidate]
    reason: str
    excluded: dict[str, str]

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return asdict(self)


def _hw(c: Cluster, kind: str, algo: str, proto: str) -> float:
    return constants()["nccl_tuning"]["hw_latency_us"][kind][algo][PROTOCOLS.index(proto)]


def _base(algo: str, proto: str) -> float:
    return constants()["nccl_tuning"]["base_latency_us"][algo][PROTOCOLS.index(proto)]


def _nsteps(coll: str, n: int) -> int:
    return 2 * (n - 1) if coll == "allreduce" else n - 1


def inter_steps(c: Cluster, coll: str, algo: str) -> int:
    """Steps of (algorithm) that cross the network, as NCCL's latency formulas count them."""
    n = c.nodes
    if n == 1:
        return 0
    if algo == "ring":
        return _nsteps(coll, n)
    if algo == "tree":
        return 2 * int(math.log2(n))
    if algo == "nvls_tree":
        return 2 * max(1, int(math.log2(n)))
    if algo in ("nvls", "collnet_direct", "collnet_chain"):
        return 1
    raise HcfError(f"no latency rule for {algo}")


def latency_us(c: Cluster, coll: str, algo: str, proto: str) -> float:
    """NCCL's latency for (algorithm, protocol) on this cluster (ncclTopoTuneModel formulas)."""
    t = constants()["nccl_tuning"]
    p, n, ppn = c.ranks, c.nodes, c.gpus_per_node
    intra = _hw(c, c.intra_hw, algo, proto)
    # with one GPU per node every step crosses the network: NCCL then uses the tree's NET latency;
    # NCCL adds the network plugin's latency to each inter-node step, and again for Simple (flush)
    inter = _hw(c, "net", "tree" if ppn == 1 else algo, proto) + c.net_latency_us * (2 if proto == "Simple" else 1)
    steps = inter_steps(c, coll, algo)
    if algo == "ring":
        if n > 1:
            overhead = t["net_overhead_us"][c.cpu_vendor]
            intra = max(intra, overhead * (t["net_overhead_us"]["simple_multiplier"]
                                           if proto == "Simple" else 1))
        return _base(algo, proto) + (_nsteps(coll, p) - steps) * intra + steps * inter
    if algo == "tree":
        return _base(algo, proto) + 2 * (ppn - 1) * intra + steps * inter
    if algo == "nvls":
        return intra + steps * inter
    if algo == "nvls_tree":
        # NVLS inside the node, then up and down a tree of nodes (the tree's rule above)
        return _base(algo, proto) + intra + steps * inter
    if algo == "collnet_direct":
        arity = _v(t["collnet_arity_latency_us"])
        return _base(algo, proto) + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * arity) + steps * inter
    if algo == "collnet_chain":
        # up the node's chain of GPUs to the NIC and back down it, one network step (SHARP)
        return _base(algo, proto) + 2 * (ppn - 1) * intra + steps * inter
    raise HcfError(f"no latency rule for {algo}")


def _ll_max(c: Cluster) -> float:
    table = constants()["nccl_tuning"]["ll_max_busbw_gbps"]
    row = table[c.generation] if c.nodes == 1 else table[c.cpu_vendor]
    return row[min(c.nodes, 3) - 1]


def _ring_busbw(c: Cluster) -> float:
    # a ring crosses every node boundary once per channel: the node's NICs carry one ring hop
    return c.intra_busbw if c.nodes == 1 else min(c.intra_busbw, c.nics_per_node * c.nic_gbps)


def algbw_gbps(c: Cluster, coll: str, algo: str, proto: str) -> float:
    """Algorithm bandwidth (bytes moved / time, GB/s) of (algorithm, protocol)."""
    t = constants()["nccl_tuning"]
    p, ppn = c.ranks, c.gpus_per_node
    if algo == "ring":
        bus = _ring_busbw(c)
        if proto == "LL":
            bus = min(_ll_max(c), bus * _v(t["ring_ll_busbw_factor"]))
        elif proto == "LL128":
            bus *= _v(t["ring_ll128_busbw_factor"])
        return bus * p / _nsteps(coll, p)
    if algo == "tree":
        bus = _ring_busbw(c) * _v(t["tree_busbw_factor"])
        if proto == "LL":
            bus = min(bus * _v(t["tree_ll_busbw_factor"]), _ll_max(c))
        elif proto == "LL128":
            bus *= t["tree_ll128_busbw_factor"]["one_node" if c.nodes == 1 else "multi_node"]
        return bus * _v(t["tree_algbw_ratio"])
    if algo == "nvls":
        # multimem.ld_reduce then multimem.st: each GPU moves S (p+1)/p per direction
        # instead of the ring's 2 S (p-1)/p, at NCCL's NVLS efficiency
        eff = t["nvls_efficiency"][c.generation]
        bw = c.intra_busbw * eff * ppn / (ppn + 1)
        return bw if c.nodes == 1 else min(bw, _sharp_inter(c))
    if algo == "nvls_tree":
        # NVLS reduces each GPU's shard inside the node; the shards' node-to-node tree crosses
        # the NICs once each way with two nodes, and a middle node of a deeper tree takes two
        # children's shards through its NICs (NCCL's tuning.cc: bwInter, halved beyond 2 nodes)
        eff = t["nvls_efficiency"][c.generation]
        inter = c.nics_per_node * c.nic_gbps * (1.0 if c.nodes <= 2 else 0.5)
        return min(c.intra_busbw * eff * ppn / (ppn + 1), inter)
    if algo == "collnet_direct":
        # reduce-scatter and all-gather inside the node (ring traffic 2 (g-1)/g S per GPU),
        # each node's shards reduced once by the IB switches: S / (NICs x NIC rate)
        intra = c.intra_busbw * ppn / (2 * (ppn - 1)) if ppn > 1 else math.inf
        return min(intra, _sharp_inter(c))
    if algo == "collnet_chain":
        # NCCL rates the chain by its intra-node graph alone (tuning.cc: bw = bwIntra for CollNet),
        # at the non-ring busBw-to-algBw ratio: every GPU of the chain sends the whole message up
        # and the result down over its NVLink, so the node's NVLink rate is what bounds it
        return c.intra_busbw * _v(t["tree_algbw_ratio"])
    raise HcfError(f"no bandwidth rule for {algo}")


def nvls_steps(c: Cluster, coll: str, algo: str, size: float) -> tuple[int, int]:
    """(chunk bytes, loop steps each channel runs) of single-node NVLS all-reduce at `size`, as
    NCCL's enqueue.cc cuts it; (0, 0) for anything else (NVLS across nodes, other algorithms)."""
    if algo != "nvls" or coll != "allreduce" or c.nodes != 1:
        return 0, 0
    pipe = constants()["nccl_tuning"]["nvls_pipeline"]
    concurrent = pipe["channels"][c.generation] * c.gpus_per_node  # channels x heads
    chunk = pipe["chunk_bytes"]["value"]
    for times, smaller in pipe["chunk_shrink"]["rules"]:
        if size < times * concurrent * chunk and chunk > smaller:
            chunk = smaller
    return chunk, max(1, math.ceil(size / (concurrent * chunk)))


def nvls_step_us(c: Cluster, coll: str, algo: str, size: float, per_step_us: float | None = None) -> float:
    """Time NVLS's loop steps add beyond its bytes (NCCL's tuner ranks without it): steps x the
    per-step cost (`per_step_us`, else the constants file's fitted figure)."""
    _, steps = nvls_steps(c, coll, algo, size)
    if per_step_us is None:
        per_step_us = _v(constants()["nccl_tuning"]["nvls_pipeline"]["step_us"])
    return steps * per_step_us


def _sharp_inter(c: Cluster) -> float:
    return c.nics_per_node * c.nic_gbps * _v(constants()["nccl_tuning"]["collnet_direct_hopper_factor"])


def available(c: Cluster, coll: str) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """(algorithm, protocol) pairs NCCL would consider here, and the others with the reason."""
    pairs = [("ring", p) for p in PROTOCOLS]
    excluded: dict[str, str] = {}
    if coll == "allreduce":
        pairs += [("tree", p) for p in PROTOCOLS]
        if c.nvls and (c.nodes == 1 or c.sharp):
            pairs.append(("nvls", "Simple"))
        else:
            excluded["nvls"] = ("needs NVSwitch multicast (NVLS) in the node, and across nodes "
                                "also switch reduction (SHARP)")
        if c.nvls and c.nodes > 1:  # NCCL's NVLS_TREE: needs NVLS in the node, no SHARP
            pairs.append(("nvls_tree", "Simple"))
        else:
            excluded["nvls_tree"] = "needs NVSwitch multicast (NVLS) in the node and more than one node"
        if c.sharp and c.nodes > 1:
            pairs += [("collnet_direct", "Simple"), ("collnet_chain", "Simple")]
        else:
            excluded["collnet_direct"] = excluded["collnet_chain"] = \
                "needs InfiniBand switch reduction (SHARP) and > 1 node"
    else:
        excluded["tree/nvls/collnet"] = f"modelled for all-reduce only; {coll} uses the ring"
    return pairs, excluded


def select(c: Cluster, collective: str, size: float) -> Choice:
    """Rank every (algorithm, protocol) by time = latency + size / algbw and say why the winner wins."""
    coll = canonical_collective(collective)
    if coll not in MODELLED:
        raise HcfError(f"the NCCL model covers {', '.join(MODELLED)}; got {collective!r}")
    check_size(size)
    if c.ranks < 2:
        raise HcfError("the NCCL model needs at least 2 ranks")
    pairs, excluded = available(c, coll)
    cands = []
    for algo, proto in pairs:
        lat, bw = latency_us(c, coll, algo, proto), algbw_gbps(c, coll, algo, proto)
        cands.append(Candidate(algo, proto, lat, bw, lat + size / (bw * 1e3)))
    cands.sort(key=lambda x: x.time_us)
    b = cands[0]
    bw_us = b.time_us - b.latency_us
    reason = (f"{b.algorithm}/{b.protocol} for {human_bytes(size)} on {c.ranks} GPUs "
              f"({c.nodes} node{'s' if c.nodes > 1 else ''}): {b.time_us:.2f} us = "
              f"{b.latency_us:.2f} us latency + {bw_us:.2f} us at {b.algbw_gbps:.1f} GB/s; "
              + ("latency-bound" if b.latency_us > bw_us else "bandwidth-bound"))
    if len(cands) > 1:
        r = cands[1]
        better = [w for w, ok in (("lower latency", b.latency_us < r.latency_us),
                                  ("higher bandwidth", b.algbw_gbps > r.algbw_gbps)) if ok]
        why = " and ".join(better) or "lower time"

        reason += (f"; beats {r.algorithm}/{r.protocol} ({r.time_us:.2f} us, "
                   f"{r.time_us / b.time_us:.2f}x) by its {why}")
    return Choice(b, cands, reason, excluded)


def busbw_gbps(collective: str, ranks: int, size: float, time_us: float) -> float:
    """nccl-tests bus bandwidth in GB/s."""
    coll = canonical_collective(collective)
    factor = 2 * (ranks - 1) / ranks if coll == "allreduce" else (ranks - 1) / ranks
    return size / (time_us * 1e3) * factor


def compare_published(name: str = "dgx-h100") -> list[dict]:
    """Our prediction beside each published figure of the constants file (for docs/hcf.md)."""
    out = []
    for pub in constants()["published"]:
        c = cluster(name, pub["nodes"])
        for size in [pub["size"]] if "size" in pub else [pub["min_size"], 1 << 30]:
            out.append(_compare_one(pub, c, size))
    return out


def _compare_one(pub: dict, c: Cluster, size: int) -> dict:
    choice = select(c, pub["collective"], size)
    pick = choice.best
    if pub.get("algorithm"):  # a published run that forced one algorithm
        pick = min((x for x in choice.candidates if x.algorithm == pub["algorithm"]),
                   key=lambda x: x.time_us)
    row = {"machine": pub["machine"], "size": size,
           "ours_algorithm": f"{pick.algorithm}/{pick.protocol}", "ours_time_us": pick.time_us,
           "ours_busbw_gbps": busbw_gbps(pub["collective"], c.ranks, size, pick.time_us),
           "source": pub["source"]}
    if "busbw_gbps" in pub:
        row.update(published=pub["busbw_gbps"], unit="GB/s busbw",
                   error=row["ours_busbw_gbps"] / pub["busbw_gbps"] - 1)
    else:
        row.update(published=pub["time_us"], unit="us", error=pick.time_us / pub["time_us"] - 1)
    return row
