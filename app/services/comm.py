"""Communication service: build topologies, simulate, sweep algorithms, faults, overlap, gloo measure."""

from __future__ import annotations

import json

from app.services.runner import run_json_child

MAX_DRAW_GPUS = 256  # the page draws every node; bigger clusters belong to the CLI
MAX_FLOW_GPUS = 64  # flow-level (per-link loads) up to here, analytical above
MAX_TOPOLOGY_JSON = 256 * 1024
MAX_NAME_CHARS = 128  # topology and node names: labels in figures and reports
# bytes on the wire per byte of fp32 gradient; codec compute time is not modelled here
CODECS = {"none": 1.0, "fp16": 0.5, "int8": 0.25 + 4 / 1024, "topk 1%": None}
MEASURE_TIMEOUT_S = 240.0
MARK = "@@GLOO@@"


def build(kind: str, nodes: int, link: str | None = None, oversubscription: float = 1.0,
          custom: dict | None = None):
    """A validated topology from a preset and its parameters, or from custom JSON."""
    from hcf_sim.errors import HcfError
    from hcf_sim.topology import build_topology, from_json

    if kind == "custom":
        if not custom:
            raise HcfError("upload a topology JSON first (nodes with kind, links with src/dst)")
        topo = from_json(check_custom(custom))
    else:
        topo = build_topology(kind, int(nodes), link or None, float(oversubscription or 1.0))
    if len(topo.gpus) > MAX_DRAW_GPUS:
        raise HcfError(f"{len(topo.gpus)} GPUs: the page draws up to {MAX_DRAW_GPUS}; use "
                       "`uol hcf simulate` for larger clusters")
    return topo.validate()


def _check_name(what: str, value) -> None:
    from hcf_sim.errors import HcfError

    text = str(value)
    if not text or len(text) > MAX_NAME_CHARS or not text.isprintable():
        raise HcfError(f"{what} {text[:40]!r}: names are 1 to {MAX_NAME_CHARS} printable "
                       "characters (no control characters such as NUL)")


def check_custom(custom) -> dict:
    """`custom` if it is an uploaded topology object with sane names, else an HcfError.

    A custom topology is a value (the JSON the page's upload parsed), never a path: a string
    is refused before anything touches the file system, so a client cannot read files or
    learn which exist through the simulator's errors.
    """
    from hcf_sim.errors import HcfError

    if not isinstance(custom, dict):
        raise HcfError("a custom topology is the JSON object uploaded through the page, not "
                       f"{type(custom).__name__} (file names and paths are not accepted)")
    if "name" in custom:
        _check_name("topology name", custom["name"])
    for node in custom.get("nodes") or []:
        if isinstance(node, dict) and "id" in node:
            _check_name("node id", node["id"])
    return custom


def wire_ratio(codec: str, ranks: int) -> float:
    """Compressed bytes per fp32 byte; top-k all-gathers values + indices from every rank."""
    if codec == "topk 1%":
        return min(1.0, 2 * 0.01 * ranks)
    return CODECS.get(codec, 1.0) or 1.0


def simulate(topo, collective: str, size: float, algorithm: str, codec: str = "none") -> dict:
    """One collective (flow-level when small enough, with every link's load); JSON-ready."""
    from hcf_sim.service import simulate as sim

    p = len(topo.gpus)
    method = "flow" if p <= MAX_FLOW_GPUS else "analytical"
    ratio = wire_ratio(codec, p)
    res = sim(topo, collective, max(1.0, size * ratio), algorithm, method,
              top_links=topo.graph.number_of_edges() * 2).to_dict()
    res.update(codec=codec, wire_ratio=ratio, logical_size=size)
    if ratio != 1.0:
        res["notes"].append(f"{codec}: {ratio:.1%} of the bytes on the wire; codec compute time "
                            "not included (measure it with `uol hcf train`)")
    res["utilisation"] = {x["link"]: x["utilisation"] for x in res["link_load"]}
    return res


def sweep_curves(topo, collective: str, lo: int = 1 << 10, hi: int = 1 << 30,
                 points: int = 21) -> dict:
    """Analytical time of every candidate algorithm over sizes, and the exact crossovers."""
    from hcf_sim.collectives import analytical_cost
    from hcf_sim.selector import candidates, crossovers
    from hcf_sim.service import topology_params

    p = len(topo.gpus)
    intra, inter, group = topology_params(topo, "Simple", 0.0, p)
    sizes = [lo * (hi / lo) ** (i / (points - 1)) for i in range(points)]
    algos = candidates(collective, p, group)
    times = {a: [analytical_cost(collective, a, p, s, intra, inter, group).total for s in sizes]
             for a in algos}
    cross = [{"size": c.size, "frm": c.frm, "to": c.to,
              "time_s": analytical_cost(collective, c.to, p, c.size, intra, inter, group).total}
             for c in crossovers(collective, p, intra, inter, group, lo, hi)]
    return {"sizes": sizes, "times": times, "crossovers": cross}


def fault(topo, element: list[str], collective: str, size: float, algorithm: str) -> dict:
    """Fail a clicked link ['link', 'u,v'] or node ['node', name]; before/after and re-plan."""
    from hcf_sim.faults import fault_scenario

    kind, target = element
    if kind == "node":
        kind = "node" if topo.graph.nodes[target].get("kind") == "gpu" else "switch"
    if kind == "switch" and topo.graph.nodes[target].get("kind") == "nic":
        # a NIC is not a switch to hcf_sim: failing it is failing its GPU's only uplink
        gpu = next(n for n in topo.graph.neighbors(target)
                   if topo.graph.nodes[n].get("kind") == "gpu")
        kind, target = "link", f"{gpu},{target}"
    method = "flow" if len(topo.gpus) <= MAX_FLOW_GPUS else "analytical"
    rep = fault_scenario(topo, kind, target, collective, size, algorithm, method)
    return rep.to_dict()


def overlap(topo, collective_algo: str, kind: str, stages: int = 4, microbatches: int = 8,
            layers: int = 8, layer_mib: float = 4.0) -> dict:
    """Per-rank Gantt rows of a DDP step (bucketed all-reduces) or a pipeline schedule."""
    from hcf_sim.service import simulate as sim

    def allreduce_s(nbytes: float) -> float:
        return sim(topo, "allreduce", max(1.0, nbytes), collective_algo, "analytical").time

    if kind == "ddp":
        from hcf_sim.overlap import ddp_step

        nbytes = [int(layer_mib * (1 << 20))] * layers
        # backward per layer sized so compute and communication are of the same order
        bwd = [max(allreduce_s(b), 1e-6) * 0.8 for b in nbytes]
        r = ddp_step(nbytes, bwd, sum(bwd) / 2, 25.0, allreduce_s, rank_slowdown=(1.0, 1.0))
        summary = (f"DDP step {r.step_time * 1e3:.2f} ms: compute {r.compute_time * 1e3:.2f} ms, "
                   f"comm {r.comm_time * 1e3:.2f} ms of which {r.exposed_comm * 1e3:.2f} ms "
                   f"exposed ({r.overlap_fraction:.0%} hidden), {len(r.buckets)} buckets")
    else:
        from hcf_sim.pipeline import simulate_pipeline

        p2p = sim(topo, "broadcast", 1 << 20, "tree", "analytical").time if len(topo.gpus) > 1 \
            else 0.0
        r = simulate_pipeline(stages, microbatches, kind, 1e-3, 2.0, p2p, 2,
                              allreduce_s(64 << 20))
        summary = (f"{kind}: {stages} stages x {microbatches} micro-batches, makespan "
                   f"{r.makespan * 1e3:.2f} ms, utilisation {r.utilisation:.0%} (textbook bubble "
                   f"{r.ideal_bubble_fraction:.0%})")
    rows = [{"rank": f"rank {e.rank}", "name": e.label, "start": e.start,
             "duration": e.end - e.start, "kind": e.kind} for e in r.events]
    return {"rows": rows, "summary": summary}


def measure_gloo(sizes: list[int], ranks: int = 2, iters: int = 5,
                 timeout: float = MEASURE_TIMEOUT_S) -> dict:
    """Real all-reduce on `ranks` gloo processes (in a worker), fitted alpha-beta, predicted rows."""
    from hcf_sim.calibrate import fit_alpha_beta

    code = ("import json, sys\nfrom hcf_sim.runtime import run_local\n"
            "t = json.loads(sys.argv[1])\n"
            f"print({MARK!r} + json.dumps(run_local(t, int(sys.argv[2]))))\n")
    task = json.dumps({"kind": "allreduce", "sizes": sizes, "iters": iters, "warmup": 2})
    res = run_json_child(["-c", code, task, str(ranks)], MARK, None, timeout,
                         timed_out="the gloo run did not finish within {timeout:.0f} s",
                         failed="gloo run failed (status {status}): ", tail=500)
    if "rows" not in res:
        return res
    rows = res["rows"]
    # fit on the smallest and largest sizes, so the ones between are held out (a real check)
    ends = [rows[0], rows[-1]] if len(rows) > 2 else rows
    a, b, _ = fit_alpha_beta([r["size"] for r in ends], [r["median"] for r in ends])
    out = []
    for r in rows:
        pred = a + b * r["size"]
        out.append({"size": r["size"], "measured": r["median"], "p10": r["p10"], "p90": r["p90"],
                    "predicted": pred, "error": abs(pred - r["median"]) / r["median"],
                    "held_out": r not in ends})
    return {"ok": True, "rows": out, "alpha": a, "beta": b, "ranks": ranks}
