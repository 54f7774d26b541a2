"""Interchange: export a scenario as ASTRA-sim inputs (analytical network YAML, system JSON) and read nccl-tests output."""

from __future__ import annotations

import json
from pathlib import Path

from hcf_sim.calibration.nccl_log import read_nccl_tests as read
from hcf_sim.collectives.nccl_model import constants
from hcf_sim.errors import HcfError
from hcf_sim.fabric.topology import Topology

# our algorithm names -> ASTRA-sim's collective implementation names (astraccl/CollectiveImplLookup.cc)
ASTRA_IMPL = {"ring": "ring", "tree": "doubleBinaryTree", "recursive_doubling": "halvingDoubling",
              "rabenseifner": "halvingDoubling", "hierarchical": "ring", "direct": "direct"}


def astra_network(topo: Topology) -> dict:
    """ASTRA-sim analytical network: one entry per dimension (topology, npus_count, bandwidth GB/s, latency ns)."""
    gpus = topo.gpus
    g = topo.graph

    def first_link(kind_pred) -> dict:
        for u, v, d in g.edges(data=True):
            if kind_pred(u, v):
                return d
        return next(iter(g.edges(data=True)))[2]

    if topo.group_size > 1:  # rail: an NVSwitch island per server, then the rail fabric
        nv = first_link(lambda u, v: u.startswith("nvs") or v.startswith("nvs"))
        servers = len(gpus) // topo.group_size
        bw, lat = _astra_link(nv)
        if servers == 1:  # one HGX node: ASTRA-sim's validated form is a single Switch dimension
            return {"topology": ["Switch"], "npus_count": [topo.group_size], "bandwidth": [bw],
                    "latency": [lat]}
        ib = first_link(lambda u, v: "nic" in u + v and "rail" in u + v)
        return {"topology": ["Switch", "Switch"], "npus_count": [topo.group_size, servers],
                "bandwidth": [bw, ib["bandwidth"] / 1e9],
                "latency": [lat, ib["latency"] * 1e9 * 4]}
    d = first_link(lambda u, v: True)
    if topo.name.startswith("ring"):
        shape = ["Ring"]
    elif topo.name.startswith("full"):
        shape = ["FullyConnected"]
    elif topo.name.startswith("torus"):
        dims = [int(x) for x in topo.name.split("-", 1)[1].split("x")]
        return {"topology": ["Ring"] * len(dims), "npus_count": dims, "bandwidth": [d["bandwidth"] / 1e9] * len(dims),
                "latency": [d["latency"] * 1e9] * len(dims)}
    else:  # fat-tree, dragonfly, custom: ASTRA-sim's Switch stands for a non-blocking fabric (2 hops)
        shape = ["Switch"]
    return {"topology": shape, "npus_count": [len(gpus)], "bandwidth": [d["bandwidth"] / 1e9],
            "latency": [d["latency"] * 1e9]}


def _astra_link(link: dict) -> tuple[float, float]:
    """(GB/s, ns) of a link in ASTRA-sim's conventions: their validated figures where they publish
    one for this link technology (nccl_constants.json), else our bandwidth and a switch's 2 hops."""

    published = constants()["astra_sim"].get(link.get("preset", ""))
    if published:
        return published["bandwidth_gbps"], published["latency_ns"]
    return link["bandwidth"] / 1e9, link["latency"] * 1e9 * 2


def astra_system(dims: int, algorithm: str = "ring") -> dict:
    """ASTRA-sim system JSON with the keys Sys.cc parses; one implementation per dimension."""
    if algorithm not in ASTRA_IMPL:
        raise HcfError(f"no ASTRA-sim implementation for {algorithm!r}; choose one of {', '.join(ASTRA_IMPL)}")
    impl = [ASTRA_IMPL[algorithm]] * dims
    return {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
            "preferred-dataset-splits": 4, "all-reduce-implementation": impl, "all-gather-implementation": impl,
            "reduce-scatter-implementation": impl, "all-to-all-implementation": ["direct"] * dims,
            "collective-optimization": "localBWAware", "local-mem-bw": 1600, "boost-mode": 0}


def _yaml(d: dict) -> str:
    # the network file is a flat mapping of lists: write it by hand, no YAML dependency needed
    def fmt(x: object) -> str:
        return f"{x:.6g}" if isinstance(x, float) else str(x)
    return "".join(f"{k}: [ {', '.join(fmt(x) for x in v)} ]\n" for k, v in d.items())


def export_astra(topo: Topology, out_dir: str | Path, algorithm: str = "ring") -> list[str]:
    """Write network.yml and system.json for ASTRA-sim's analytical backend; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    net = astra_network(topo)
    (out / "network.yml").write_text(f"# exported by UOL Studio hcf from {topo.name}\n" + _yaml(net))
    (out / "system.json").write_text(json.dumps(astra_system(len(net["topology"]), algorithm), indent=2))
    return [str(out / "network.yml"), str(out / "system.json")]


def read_nccl_tests(path: str | Path) -> dict:
    """The first run of an nccl-tests file (any layout); see hcf_sim.calibration.nccl_log for every run."""

    return read(path)
