"""Flow-level simulation over a real topology: shortest-path/ECMP routing and max-min fair link sharing."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from hcf_sim.errors import MAX_FLOW_RANKS, HcfError, check_ranks, check_size
from hcf_sim.fabric.links import get_protocol
from hcf_sim.fabric.topology import Topology
from hcf_sim.simulation.schedules import Phase, phases

# ecmp: one hashed path per flow; shortest: always the first; spread: even split over equal-cost hops
ROUTINGS = ("ecmp", "shortest", "spread")


def _mix(a: int, b: int, c: int) -> int:
    # a murmur-style finaliser: structured rank pairs (i, i ^ 512) must not all hash alike
    h = (a * 0x9E3779B1 + b * 0x85EBCA77 + c * 0xC2B2AE3D) & 0xFFFFFFFF
    h ^= h >> 16
    h = (h * 0x7FEB352D) & 0xFFFFFFFF
    h ^= h >> 15
    h = (h * 0x846CA68B) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _mix_array(a: np.ndarray, b: np.ndarray, c: int) -> np.ndarray:
    # _mix on arrays (uint64 holds every product below before the 32-bit mask)
    m = np.uint64(0xFFFFFFFF)
    h = (a.astype(np.uint64) * np.uint64(0x9E3779B1) + b.astype(np.uint64) * np.uint64(0x85EBCA77)
         + np.uint64(c) * np.uint64(0xC2B2AE3D)) & m
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x7FEB352D)) & m
    h ^= h >> np.uint64(15)
    h = (h * np.uint64(0x846CA68B)) & m
    return (h ^ (h >> np.uint64(16))).astype(np.int64)


class Router:
    """Routes between nodes of a topology: hop-count shortest paths, one path or ECMP-hashed among equals."""

    def __init__(self, topo: Topology, protocol: str = "Simple") -> None:
        g = topo.graph
        self.topo = topo
        self.nodes = list(g.nodes)
        self.index = {n: i for i, n in enumerate(self.nodes)}
        # directed link ids: each undirected edge is two independent directions (full duplex)
        self.links: list[tuple[str, str]] = []
        self.link_id: dict[tuple[int, int], int] = {}
        cap, lat, step = [], [], []
        for u, v, d in g.edges(data=True):
            for a, b in ((u, v), (v, u)):
                self.link_id[(self.index[a], self.index[b])] = len(self.links)
                self.links.append((a, b))
                cap.append(d["bandwidth"])
                lat.append(d["latency"])
                step.append(d["step_latency"][protocol])
        self.cap, self.lat, self.step = np.array(cap), np.array(lat), np.array(step)
        self.nbrs = [np.array(sorted(self.index[m] for m in g.neighbors(n)), dtype=np.int64) for n in self.nodes]
        self.gpu_idx = np.array([self.index[n] for n in topo.gpus], dtype=np.int64)
        rows = [self.index[u] for u, v in g.edges] + [self.index[v] for u, v in g.edges]
        cols = [self.index[v] for u, v in g.edges] + [self.index[u] for u, v in g.edges]
        adj = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(self.nodes),) * 2)
        # distance from every GPU to every node (graph is undirected, so it is also the distance to the GPU)
        self.dist = shortest_path(adj, unweighted=True, indices=self.gpu_idx)
        self.dst_row = {int(n): i for i, n in enumerate(self.gpu_idx)}
        self.gpu_order = np.argsort(self.gpu_idx)
        self.gpu_sorted = self.gpu_idx[self.gpu_order]
        self._cache: dict[tuple[int, int, str], np.ndarray] = {}
        # padded neighbour and link-id tables (-1 = none): every flow of a phase walks at once
        deg = max((len(x) for x in self.nbrs), default=0)
        self.nb_pad = np.full((len(self.nodes), max(deg, 1)), -1, dtype=np.int64)
        self.lid_pad = np.full_like(self.nb_pad, -1)
        for u, nb in enumerate(self.nbrs):
            self.nb_pad[u, :len(nb)] = nb
            self.lid_pad[u, :len(nb)] = [self.link_id[(u, int(v))] for v in nb]

    def routes(self, src: np.ndarray, dst: np.ndarray, mode: str = "ecmp") -> tuple[np.ndarray, np.ndarray]:
        """(flow_of, link_of) of every flow src[i] -> dst[i] in hop order, all flows walked together.

        The same paths as `route` one by one (same hash, same first-path rule), without a
        Python loop per flow: a phase of 1,024 flows costs a few array operations per hop.
        """
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        cur, tgt = self.gpu_idx[src].copy(), self.gpu_idx[dst]
        rows = np.searchsorted(self.gpu_sorted, tgt)
        rows = self.gpu_order[rows]
        if not np.isfinite(self.dist[rows, cur]).all():
            bad = int(np.flatnonzero(~np.isfinite(self.dist[rows, cur]))[0])
            raise HcfError(f"no route from {self.nodes[cur[bad]]} to {self.nodes[tgt[bad]]}: the topology is split")
        flows, links = [], []
        active, hop = np.flatnonzero(cur != tgt), 0
        while len(active):
            u, r = cur[active], rows[active]
            nb = self.nb_pad[u]
            ok = (nb >= 0) & (self.dist[r[:, None], np.maximum(nb, 0)] == self.dist[r, u][:, None] - 1)
            cnt = ok.sum(1)
            pick = np.zeros(len(active), dtype=np.int64) if mode == "shortest" else \
                np.where(cnt > 1, _mix_array(src[active], dst[active], hop) % np.maximum(cnt, 1), 0)
            col = (np.cumsum(ok, 1) > pick[:, None]).argmax(1)
            flows.append(active)
            links.append(self.lid_pad[u, col])
            cur[active] = nb[np.arange(len(active)), col]
            active, hop = active[cur[active] != tgt[active]], hop + 1
        if not flows:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        flow_of, link_of = np.concatenate(flows), np.concatenate(links)
        order = np.argsort(flow_of, kind="stable")  # hop order kept within each flow
        return flow_of[order], link_of[order]

    def route(self, src_rank: int, dst_rank: int, mode: str = "ecmp") -> np.ndarray:
        """Directed link ids from GPU rank src to rank dst; ECMP hashes the flow over equal-cost next hops."""
        key = (src_rank, dst_rank, mode)
        if key in self._cache:
            return self._cache[key]
        s, d = int(self.gpu_idx[src_rank]), int(self.gpu_idx[dst_rank])
        row = self.dist[self.dst_row[d]]
        if not np.isfinite(row[s]):
            raise HcfError(f"no route from {self.nodes[s]} to {self.nodes[d]}: the topology is split")
        path, u, hop = [], s, 0
        while u != d:
            nb = self.nbrs[u]
            cand = nb[row[nb] == row[u] - 1]
            # a fixed per-flow hash, as switches hash the 5-tuple; 'shortest' always takes the first
            pick = 0 if mode == "shortest" or len(cand) == 1 else _mix(src_rank, dst_rank, hop) % len(cand)
            v = int(cand[pick])
            path.append(self.link_id[(u, v)])
            u, hop = v, hop + 1
        out = np.array(path, dtype=np.int64)
        self._cache[key] = out
        return out

    def spread(self, src_rank: int, dst_rank: int) -> tuple[np.ndarray, np.ndarray]:
        """Directed link ids and the share of the flow on each: split evenly over equal-cost next hops.

        The expected load of per-flow ECMP hashing over many flows (and what packet spraying or
        adaptive routing approaches): no single hash draw's luck, so removing a link can only take
        options away from a flow, never hand it a luckier spread.
        """
        key = (src_rank, dst_rank, "spread")
        if key in self._cache:
            return self._cache[key]
        s, d = int(self.gpu_idx[src_rank]), int(self.gpu_idx[dst_rank])
        row = self.dist[self.dst_row[d]]
        if not np.isfinite(row[s]):
            raise HcfError(f"no route from {self.nodes[s]} to {self.nodes[d]}: the topology is split")
        share: dict[int, float] = {}
        level = {s: 1.0}
        while d not in level:
            nxt: dict[int, float] = {}
            for u, f in level.items():
                nb = self.nbrs[u]
                cand = nb[row[nb] == row[u] - 1]
                for v in cand:
                    v = int(v)
                    lid = self.link_id[(u, v)]
                    share[lid] = share.get(lid, 0.0) + f / len(cand)
                    nxt[v] = nxt.get(v, 0.0) + f / len(cand)
            level = nxt
        out = (np.fromiter(share, dtype=np.int64, count=len(share)),
               np.fromiter(share.values(), dtype=float, count=len(share)))
        self._cache[key] = out
        return out

    def route_to_node(self, src_rank: int, node: str, up: bool = True) -> np.ndarray:
        """Directed link ids from rank src to a switch (up) or back (down): a flow a reducing switch ends."""
        key = (src_rank, -1 - self.index[node], "up" if up else "down")
        if key in self._cache:
            return self._cache[key]
        s, u = int(self.gpu_idx[src_rank]), self.index[node]
        row = self.dist[self.dst_row[s]]
        if not np.isfinite(row[u]):
            raise HcfError(f"no route from {self.nodes[s]} to {node}: the topology is split")
        walk = []
        while u != s:  # from the switch back toward the GPU along decreasing distance
            nb = self.nbrs[u]
            v = int(nb[row[nb] == row[u] - 1][0])
            walk.append(self.link_id[(v, u)] if up else self.link_id[(u, v)])
            u = v
        out = np.array(walk[::-1] if up else walk, dtype=np.int64)
        self._cache[key] = out
        return out

    def path_nodes(self, src_rank: int, dst_rank: int, mode: str = "ecmp") -> list[str]:
        """The node names along the route from rank src to rank dst."""
        ids = self.route(src_rank, dst_rank, mode)
        return [self.links[ids[0]][0], *(self.links[i][1] for i in ids)] if len(ids) else []


def maxmin_rates(flow_of: np.ndarray, link_of: np.ndarray, nflows: int, cap: np.ndarray,
                 weight: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair rates by progressive filling; (flow_of[i], link_of[i]) lists which flow uses which link.

    weight[i] is the share of flow_of[i]'s rate that crosses link_of[i] (1 on a single path).
    """
    weight = np.ones(len(flow_of)) if weight is None else weight
    rates = np.zeros(nflows)
    left = cap.astype(float).copy()
    f, lk, w = flow_of, link_of, weight
    while len(f):
        counts = np.bincount(lk, weights=w, minlength=len(cap))
        used = counts > 0
        if not used.any():
            break
        share = np.full(len(cap), np.inf)
        share[used] = left[used] / counts[used]
        r = share.min()
        bottleneck = share <= r * (1 + 1e-9)
        frozen = np.zeros(nflows, dtype=bool)
        frozen[f[bottleneck[lk]]] = True
        rates[frozen] = r
        hit = frozen[f]
        left -= r * np.bincount(lk[hit], weights=w[hit], minlength=len(cap))
        np.maximum(left, 0.0, out=left)
        # frozen flows leave the arrays: later rounds only touch the flows still growing
        keep = ~hit
        f, lk, w = f[keep], lk[keep], w[keep]
    return rates


@dataclass
class PhaseResult:
    """Timing of one phase: latency part, transfer part under sharing, and its repeat count."""

    label: str
    latency: float
    transfer: float
    reduction: float
    repeat: int

    @property
    def total(self) -> float:
        """Time of all repeats of this phase in seconds."""
        return (self.latency + self.transfer + self.reduction) * self.repeat


@dataclass
class FlowRun:
    """The result of a flow-level run: total time, per-phase times and bytes per directed link."""

    time: float
    phases: list[PhaseResult]
    link_bytes: dict[tuple[str, str], float] = field(default_factory=dict)
    link_capacity: dict[tuple[str, str], float] = field(default_factory=dict)


def simulate_phase(router: Router, ph: Phase, proto_eff: float, gamma: float, routing: str,
                   load: np.ndarray) -> PhaseResult:
    """Time one phase: the slowest flow's latency, then flows drain under max-min sharing, re-shared at each finish."""
    p_flow, p_link = router.routes(ph.src, ph.dst, "shortest" if routing == "spread" else routing)
    if routing == "spread" and len(ph.src):
        pairs = zip(ph.src.tolist(), ph.dst.tolist(), strict=True)
        routes, shares = (list(x) for x in zip(*(router.spread(a, b) for a, b in pairs), strict=True))
        lens = np.array([len(r) for r in routes])
        flow_of, link_of = np.repeat(np.arange(len(routes)), lens), np.concatenate(routes)
        weight = np.concatenate(shares)
    else:
        flow_of, link_of, weight = p_flow, p_link, np.ones(len(p_link))
    # per-step latency: the protocol's step cost of the slowest link class on the path plus propagation
    lat = 0.0
    if len(p_link):
        starts = np.flatnonzero(np.r_[True, p_flow[1:] != p_flow[:-1]])
        lat = float((np.maximum.reduceat(router.step[p_link], starts)
                     + np.add.reduceat(router.lat[p_link], starts)).max())
    wire = ph.nbytes / proto_eff
    np.add.at(load, link_of, wire[flow_of] * weight * ph.repeat)
    t = drain(flow_of, link_of, weight, wire, router.cap)
    return PhaseResult(ph.label, float(lat), t, ph.reduce_bytes * gamma, ph.repeat)


def drain(flow_of: np.ndarray, link_of: np.ndarray, weight: np.ndarray, nbytes: np.ndarray,
          cap: np.ndarray) -> float:
    """Seconds until every flow has sent its bytes under max-min sharing, re-shared at each finish."""
    # only the links some flow crosses take part: every array below is that long, not the fabric's
    used, link_of = np.unique(link_of, return_inverse=True)
    cap = cap[used]
    remaining, t = np.asarray(nbytes, dtype=float).copy(), 0.0
    wire = remaining.copy()
    alive = remaining > 0
    while alive.any():
        idx = np.flatnonzero(alive)
        keep = alive[flow_of]
        sub_flow = np.searchsorted(idx, flow_of[keep])
        rates = maxmin_rates(sub_flow, link_of[keep], len(idx), cap, weight[keep])
        dt = float(np.min(remaining[idx] / rates))
        t += dt
        remaining[idx] -= rates * dt
        alive[idx[remaining[idx] <= 1e-9 * wire[idx] + 1e-12]] = False
    return t


def flow_simulate(topo: Topology, collective: str, algorithm: str, size: float, ranks: int | None = None,
                  protocol: str = "Simple", routing: str = "ecmp", gamma: float = 0.0,
                  router: Router | None = None) -> FlowRun:
    """Run one collective flow-by-flow over the topology's GPUs (rank i = i-th GPU)."""
    gpus = topo.gpus
    p = check_ranks(ranks or len(gpus), MAX_FLOW_RANKS)
    check_size(size)
    if p > len(gpus):
        raise HcfError(f"{p} ranks asked but topology {topo.name} has only {len(gpus)} GPUs")
    if routing not in ROUTINGS:
        raise HcfError(f"routing must be one of {', '.join(ROUTINGS)}, got {routing!r}")
    eff = get_protocol(protocol).efficiency
    router = router or Router(topo, protocol)
    load = np.zeros(len(router.links))
    # phases with identical flows (every step of a ring) are simulated once and repeated
    results = [simulate_phase(router, ph, eff, gamma, routing, load)
               for ph in phases(collective, algorithm, p, size, topo.group_size)]
    used = np.flatnonzero(load)
    return FlowRun(sum(r.total for r in results), results,
                   {router.links[i]: float(load[i]) for i in used},
                   {router.links[i]: float(router.cap[i]) for i in used})
