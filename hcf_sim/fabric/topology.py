"""Cluster topologies as networkx graphs: fat-tree, torus, dragonfly, rail-optimised, ring, fully connected, custom JSON."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from hcf_sim.errors import MAX_PATH_CHARS, HcfError, check_name, check_ranks, require_positive
from hcf_sim.fabric.links import LinkPreset, custom_link, get_preset


@dataclass
class Topology:
    """A cluster: nodes are GPUs, NICs and switches; each edge carries a link (bandwidth, latency, protocol)."""

    name: str
    graph: nx.Graph
    group_size: int = 1  # GPUs per server: the intra level of hierarchical algorithms

    @property
    def gpus(self) -> list[str]:
        """GPU node names in rank order."""
        g = [(d["order"], n) for n, d in self.graph.nodes(data=True) if d.get("kind") == "gpu"]
        return [n for _, n in sorted(g)]

    def link(self, u: str, v: str) -> dict:
        """Attributes of the link u-v (bandwidth B/s, latency s, preset, step_latency)."""
        if not self.graph.has_edge(u, v):
            raise HcfError(f"no link {u}-{v} in topology {self.name}")
        return self.graph.edges[u, v]

    def summary(self) -> dict:
        """Counts of GPUs, NICs, switches and links, for tables and JSON."""
        kinds = [d.get("kind") for _, d in self.graph.nodes(data=True)]
        return {"name": self.name, "gpus": kinds.count("gpu"), "nics": kinds.count("nic"),
                "switches": kinds.count("switch"), "links": self.graph.number_of_edges(),
                "group_size": self.group_size}

    def validate(self) -> Topology:
        """Raise HcfError unless every GPU can reach every other GPU."""
        gpus = self.gpus
        if not gpus:
            raise HcfError(f"topology {self.name} has no GPU nodes (nodes need kind 'gpu')")
        comp = nx.node_connected_component(self.graph, gpus[0])
        lost = [g for g in gpus if g not in comp]
        if lost:
            raise HcfError(f"topology {self.name} is disconnected: GPUs {lost[:5]}{'...' if len(lost) > 5 else ''} "
                           f"cannot reach {gpus[0]}; add links or remove those GPUs")
        return self

    def copy(self) -> Topology:
        """A deep copy that faults can edit."""
        return Topology(self.name, self.graph.copy(), self.group_size)

    def to_json(self) -> dict:
        """The custom-JSON form of this topology (readable by from_json)."""
        nodes = [{"id": n, "kind": d.get("kind", "switch")} for n, d in self.graph.nodes(data=True)]
        links = [{"src": u, "dst": v, "bandwidth_gbps": d["bandwidth"] / 1e9, "latency_us": d["latency"] * 1e6,
                  "step_latency_us": {k: v * 1e6 for k, v in d["step_latency"].items()},
                  "protocol": d["preset"]}
                 for u, v, d in self.graph.edges(data=True)]
        return {"name": self.name, "group_size": self.group_size, "nodes": nodes, "links": links}


def _add_node(g: nx.Graph, name: str, kind: str) -> None:
    g.add_node(name, kind=kind, order=g.number_of_nodes())


def _add_link(g: nx.Graph, u: str, v: str, link: LinkPreset, scale: float = 1.0) -> None:
    # bandwidth is the achievable rate per direction; scale models oversubscribed uplinks
    g.add_edge(u, v, bandwidth=link.bandwidth * scale, latency=link.hop_latency,
               step_latency=dict(link.step_latency), preset=link.name)


def ring(n: int, link: str = "nvlink4") -> Topology:
    """n GPUs in a bidirectional ring."""
    check_ranks(n)
    g, lk = nx.Graph(), get_preset(link)
    for i in range(n):
        _add_node(g, f"gpu{i}", "gpu")
    for i in range(n if n > 2 else n - 1):
        _add_link(g, f"gpu{i}", f"gpu{(i + 1) % n}", lk)
    return Topology(f"ring-{n}", g).validate()


def fully_connected(n: int, link: str = "nvlink4") -> Topology:
    """n GPUs with a direct link between every pair."""
    check_ranks(n, 4096)
    g, lk = nx.Graph(), get_preset(link)
    for i in range(n):
        _add_node(g, f"gpu{i}", "gpu")
    for i in range(n):
        for j in range(i + 1, n):
            _add_link(g, f"gpu{i}", f"gpu{j}", lk)
    return Topology(f"full-{n}", g).validate()


def torus(dims: tuple[int, ...], link: str = "nvlink4") -> Topology:
    """A 2D or 3D torus (wrap-around mesh) of GPUs, e.g. dims=(4, 4) or (4, 4, 4)."""
    if len(dims) not in (2, 3) or any(not isinstance(d, int) or d < 2 for d in dims):
        raise HcfError(f"torus dims must be 2 or 3 integers >= 2, got {dims}")
    check_ranks(math.prod(dims))
    lk = nx.grid_graph(dim=list(reversed(dims)), periodic=True)
    g, preset = nx.Graph(), get_preset(link)
    names = {c: "gpu" + "_".join(map(str, c)) for c in sorted(lk.nodes)}
    for c in sorted(lk.nodes):
        _add_node(g, names[c], "gpu")
    for u, v in lk.edges:
        _add_link(g, names[u], names[v], preset)
    return Topology(f"torus-{'x'.join(map(str, dims))}", g).validate()


def fat_tree(k: int, oversubscription: float = 1.0, link: str = "ib_ndr", hosts: int | None = None) -> Topology:
    """A k-ary fat-tree (k pods, k^3/4 hosts); oversubscription > 1 thins the edge-to-aggregation uplinks."""
    if not isinstance(k, int) or k < 2 or k % 2:
        raise HcfError(f"fat-tree arity k must be an even integer >= 2, got {k}")
    require_positive("oversubscription", oversubscription)
    cap = k ** 3 // 4
    hosts = cap if hosts is None else check_ranks(hosts)
    if hosts > cap:
        raise HcfError(f"a {k}-ary fat-tree holds {cap} hosts, asked for {hosts}; raise k")
    g, lk, h = nx.Graph(), get_preset(link), k // 2
    for c in range(h * h):
        _add_node(g, f"core{c}", "switch")
    placed = 0
    for pod in range(k):
        for a in range(h):
            _add_node(g, f"agg{pod}_{a}", "switch")
            for c in range(h):  # aggregation switch a reaches core group a
                _add_link(g, f"agg{pod}_{a}", f"core{a * h + c}", lk)
        for e in range(h):
            _add_node(g, f"edge{pod}_{e}", "switch")
            for a in range(h):
                _add_link(g, f"edge{pod}_{e}", f"agg{pod}_{a}", lk, 1.0 / oversubscription)
            for _ in range(h):
                if placed < hosts:
                    _add_node(g, f"gpu{placed}", "gpu")
                    _add_link(g, f"gpu{placed}", f"edge{pod}_{e}", lk)
                    placed += 1
    t = Topology(f"fat-tree-k{k}", g, group_size=1)
    # switches that serve no host carry no traffic; drop them to keep routing small
    t.graph.remove_nodes_from([n for n in list(g.nodes) if n.startswith("edge") and not any(
        g.nodes[m]["kind"] == "gpu" for m in g.neighbors(n))])
    return t.validate()


def dragonfly(groups: int, routers: int, hosts_per_router: int, link: str = "ib_ndr",
              global_link: str | None = None) -> Topology:
    """A dragonfly: all-to-all routers inside a group, and one global link per group pair spread over routers."""
    for name, v in (("groups", groups), ("routers per group", routers), ("hosts per router", hosts_per_router)):
        if not isinstance(v, int) or v < 1:
            raise HcfError(f"dragonfly {name} must be an integer >= 1, got {v}")
    check_ranks(groups * routers * hosts_per_router)
    g, lk, gl = nx.Graph(), get_preset(link), get_preset(global_link or link)
    gpu = 0
    for grp in range(groups):
        for r in range(routers):
            _add_node(g, f"r{grp}_{r}", "switch")
            for _ in range(hosts_per_router):
                _add_node(g, f"gpu{gpu}", "gpu")
                _add_link(g, f"gpu{gpu}", f"r{grp}_{r}", lk)
                gpu += 1
        for a in range(routers):
            for b in range(a + 1, routers):
                _add_link(g, f"r{grp}_{a}", f"r{grp}_{b}", lk)
    for a in range(groups):
        for b in range(a + 1, groups):  # round-robin the global links over the routers of each group
            _add_link(g, f"r{a}_{(b - 1) % routers}", f"r{b}_{a % routers}", gl)
    return Topology(f"dragonfly-{groups}x{routers}x{hosts_per_router}", g).validate()


def rail_optimized(servers: int, gpus_per_server: int = 8, nic: str = "ib_ndr", nvlink: str = "nvlink4",
                   pcie: str = "pcie_gen5", spines: int = 2, oversubscription: float = 1.0) -> Topology:
    """Servers with NVLink islands (one NVSwitch) of gpus_per_server GPUs, GPU i's NIC on rail switch i, rails joined by spines."""
    check_ranks(servers * gpus_per_server)
    require_positive("oversubscription", oversubscription)
    if gpus_per_server < 1 or spines < 1:
        raise HcfError("rail-optimised needs >= 1 GPU per server and >= 1 spine switch")
    g = nx.Graph()
    nv, nc, pc = get_preset(nvlink), get_preset(nic), get_preset(pcie)
    for r in range(gpus_per_server):
        _add_node(g, f"rail{r}", "switch")
    for s in range(spines):
        _add_node(g, f"spine{s}", "switch")
        for r in range(gpus_per_server):
            # one rail leaf stands for the rail's leaf layer: its uplinks are a trunk sized for
            # full bisection (servers x NIC rate over the spines) unless oversubscribed
            _add_link(g, f"rail{r}", f"spine{s}", nc, servers / (spines * oversubscription))
    for sv in range(servers):
        _add_node(g, f"nvs{sv}", "switch")
        for r in range(gpus_per_server):
            gname, nname = f"gpu{sv}_{r}", f"nic{sv}_{r}"
            _add_node(g, gname, "gpu")
            _add_node(g, nname, "nic")
            _add_link(g, gname, f"nvs{sv}", nv)
            _add_link(g, gname, nname, pc)
            _add_link(g, nname, f"rail{r}", nc)
    return Topology(f"rail-{servers}x{gpus_per_server}", g, group_size=gpus_per_server).validate()


def from_json(data: dict | str | Path) -> Topology:
    """Read a custom topology: {"nodes": [{"id", "kind"}], "links": [{"src", "dst", "protocol" | "bandwidth_gbps", "latency_us"}]}."""
    if isinstance(data, str | Path):
        check_name("topology file", data, MAX_PATH_CHARS)
        try:
            data = json.loads(Path(data).read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise HcfError(f"cannot read topology file {data}: {exc}") from exc
    try:
        return _from_dict(data)
    except (TypeError, AttributeError, ValueError, KeyError) as exc:
        if isinstance(exc, HcfError):
            raise
        # a wrongly typed field (a number for a list, text for a bandwidth) is the user's to fix
        raise HcfError(f"bad custom topology JSON: {type(exc).__name__}: {exc}") from None


def _from_dict(data) -> Topology:
    if not isinstance(data, dict) or "nodes" not in data or "links" not in data:
        raise HcfError("a custom topology needs keys 'nodes' and 'links'")
    g = nx.Graph()
    for i, n in enumerate(data["nodes"]):
        if "id" not in n:
            raise HcfError(f"node #{i} has no 'id'")
        node_id = check_name("node id", n["id"])
        kind = n.get("kind", "gpu")
        if kind not in ("gpu", "nic", "switch"):
            raise HcfError(f"node {node_id}: kind must be gpu, nic or switch, got {kind!r}")
        _add_node(g, node_id, kind)
    for i, e in enumerate(data["links"]):
        u, v = str(e.get("src")), str(e.get("dst"))
        if u not in g or v not in g:
            raise HcfError(f"link #{i} {u}-{v} names a node that is not in 'nodes'")
        protocol = check_name(f"link #{i} protocol", e.get("protocol", "custom"
                                                              if "bandwidth_gbps" in e else "nvlink4"))
        if "bandwidth_gbps" in e:
            lk = custom_link(float(e["bandwidth_gbps"]), float(e.get("latency_us", 1.0)),
                             e.get("step_latency_us"), name=protocol)
        else:
            lk = get_preset(protocol)
        _add_link(g, u, v, lk)
    group = int(data.get("group_size", 1))
    name = check_name("topology name", data.get("name", "custom"))
    return Topology(name, g, group_size=max(group, 1)).validate()


TOPOLOGY_KINDS = ("fat-tree", "torus2d", "torus3d", "dragonfly", "rail", "ring", "full", "custom")


def _near_cube(n: int, d: int) -> tuple[int, ...]:
    # the most balanced factorisation of n into d factors, so that a torus has short diameters
    best: tuple[int, ...] | None = None
    def rec(rem: int, left: int, acc: tuple[int, ...]) -> None:
        nonlocal best
        if left == 1:
            cand = tuple(sorted((*acc, rem)))
            if cand[0] >= 2 and (best is None or max(cand) - min(cand) < max(best) - min(best)):
                best = cand
            return
        for f in range(2, rem + 1):
            if rem % f == 0:
                rec(rem // f, left - 1, (*acc, f))
    rec(n, d, ())
    if best is None:
        raise HcfError(f"{n} nodes cannot form a {d}D torus (need a product of {d} factors >= 2)")
    return best


def build_topology(kind: str, nodes: int, link: str | None = None, oversubscription: float = 1.0,
                   gpus_per_server: int = 8, path: str | None = None, sharp: bool = False,
                   intra: str = "nvlink4") -> Topology:
    """Build a topology of the named kind with `nodes` GPUs (the CLI's --topology/--nodes); with
    `sharp` its InfiniBand switches reduce in the network (SHARP, NCCL's CollNet); `intra` is the
    link inside a rail server (nvlink3 for A100 servers)."""
    topo = _build(kind, nodes, link, oversubscription, gpus_per_server, path, intra)
    if sharp:
        if kind not in ("rail", "fat-tree"):
            raise HcfError(f"--sharp needs InfiniBand switches (rail or fat-tree), not {kind}")
        for n, d in topo.graph.nodes(data=True):
            d["sharp"] = d.get("kind") == "switch" and not n.startswith("nvs")
        topo.name += "-sharp"
    return topo


def _build(kind: str, nodes: int, link: str | None, oversubscription: float, gpus_per_server: int,
           path: str | None, intra: str = "nvlink4") -> Topology:
    check_name("topology", kind)
    check_ranks(nodes)
    if kind == "fat-tree":
        k = 2
        while k ** 3 // 4 < nodes:
            k += 2
        return fat_tree(k, oversubscription, link or "ib_ndr", hosts=nodes)
    if kind in ("torus2d", "torus3d"):
        return torus(_near_cube(nodes, 2 if kind == "torus2d" else 3), link or "nvlink4")
    if kind == "dragonfly":
        routers = max(2, round(nodes ** (1 / 3)))
        hosts = max(1, routers // 2)
        groups = math.ceil(nodes / (routers * hosts))
        if groups * routers * hosts != nodes:
            raise HcfError(f"{nodes} GPUs do not fill a balanced dragonfly ({routers} routers x {hosts} hosts "
                           f"per group); use {groups * routers * hosts} nodes")
        return dragonfly(groups, routers, hosts, link or "ib_ndr")
    if kind == "rail":
        if nodes % gpus_per_server:
            raise HcfError(f"rail-optimised clusters need nodes divisible by {gpus_per_server} GPUs per server, got {nodes}")
        return rail_optimized(nodes // gpus_per_server, gpus_per_server, nic=link or "ib_ndr", nvlink=intra,
                              oversubscription=oversubscription)
    if kind == "ring":
        return ring(nodes, link or "nvlink4")
    if kind == "full":
        return fully_connected(nodes, link or "nvlink4")
    if kind == "custom":
        if not path:
            raise HcfError("--topology custom needs --topology-file PATH.json")
        return from_json(path)
    raise HcfError(f"unknown topology {kind!r}; choose one of {', '.join(TOPOLOGY_KINDS)}")
