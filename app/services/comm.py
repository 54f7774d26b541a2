"""Communication service: build topologies, simulate, sweep algorithms, faults, overlap, gloo measure.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

import json

from app.services.runner import run_json_child

MAX_DRAW_GPUS = 256  # the page draws every node; bigger clusters belong to the CLI
MIN_GPUS = 2
MAX_OVERSUBSCRIPTION = 8.0
# One model answers every question on the page: flow-level with flows split evenly over
# equal-cost paths (what a fault can only take away). It is fast enough for every drawn size.
METHOD = "flow"
ROUTING = "spread"
CURVE_POINTS = 13
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
    from hcf_sim.fabric.topology import build_topology, from_json

    if kind != "custom":
        nodes = check_number("GPUs", nodes, MIN_GPUS, MAX_DRAW_GPUS, integer=True,
                             beyond="use `uol hcf simulate` for larger clusters")
        oversubscription = check_number("Oversubscription", 1.0 if oversubscription is None
                                        else oversubscription, 1.0, MAX_OVERSUBSCRIPTION)
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


def check_number(label: str, value, lo: float, hi: float, integer: bool = False,
                 beyond: str = "") -> float:
    """`value` as a number within [lo, hi], else an HcfError that names the field and its limits."""
    from hcf_sim.errors import HcfError

    kind = "a whole number" if integer else "a number"
    limits = f"{label} must be {kind} from {lo:g} to {hi:g}"
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise HcfError(f"{limits}; got {value!r}") from None
    if number != number or (integer and number != int(number)):
        raise HcfError(f"{limits}; got {value!r}")
    if not lo <= number <= hi:
        shown = int(number) if number == int(number) else number
        raise HcfError(f"{limits}; got {shown}" + (f" ({beyond})" if beyond and number > hi else ""))
    return int(number) if integer else number


def apply_faults(topo, faults: list | None):
    """The topology with each applied fault [kind, target] of the page's state removed."""
    from hcf_sim.faults import apply_fault

    for kind, target in faults or []:
        topo = apply_fault(topo, kind, target)
    return topo


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
    """One collective, every candidate beside it by the same model; JSON-ready.

    The headline, the comparison (`alternatives`) and the 'auto' pick are the same simulations,
    so the page cannot show a winner that its own numbers contradict.
    """
    from hcf_sim.errors import HcfError
    from hcf_sim.service import compare, tuned
    from hcf_sim.service import simulate as sim

    p = len(topo.gpus)
    ratio = wire_ratio(codec, p)
    wire = max(1.0, size * ratio)
    links = topo.graph.number_of_edges() * 2
    runs = compare(topo, collective, wire, METHOD, routing=ROUTING, top_links=links)
    times = runs[0].alternatives
    nccl = runs[0].model.startswith("NCCL")
    if nccl:  # one row per algorithm (its best protocol), the names the algorithm menu offers
        times = by_algorithm(times)
    if algorithm == "auto":
        chosen = runs[0]
    elif nccl and algorithm in times:
        # NCCL's own ring, tree, nvls: the same model as auto, forced to that algorithm
        chosen = tuned(topo, collective, wire, algorithm, METHOD, ROUTING, top_links=links)
    else:  # a textbook schedule NCCL does not run (rabenseifner, ...), timed as that schedule
        chosen = next((r for r in runs if r.algorithm == algorithm and not nccl), None)
        if chosen is None:
            chosen = sim(topo, collective, wire, algorithm, METHOD, routing=ROUTING, top_links=links)
    if algorithm != "auto" and chosen.time > runs[0].time * (1 + 1e-12):
        chosen.notes.append(f"{runs[0].algorithm} would take {runs[0].time * 1e6:.2f} us "
                            f"({chosen.time / runs[0].time:.2f}x faster); choose auto for it")
    chosen.alternatives = times
    if not chosen.time:
        raise HcfError(f"{collective} on {p} rank(s) moves no data; use at least 2 GPUs")
    res = chosen.to_dict()
    return _finish(res, codec, ratio, size)


def by_algorithm(times: dict[str, float]) -> dict[str, float]:
    """{'ring/LL': t, 'ring/Simple': u, ...} -> {'ring': min(t, u), ...}: each algorithm at its best protocol."""
    out: dict[str, float] = {}
    for key, t in times.items():
        algo = key.split("/")[0]
        out[algo] = min(t, out.get(algo, t))
    return out


def _finish(res: dict, codec: str, ratio: float, size: float) -> dict:
    res.update(codec=codec, wire_ratio=ratio, logical_size=size)
    if ratio != 1.0:
        res["notes"].append(f"{codec}: {ratio:.1%} of the bytes on the wire; codec compute time "
                            "not included (measure it with `uol hcf train`)")
    res["utilisation"] = {x["link"]: x["utilisation"] for x in res["link_load"]}
    return res


def sweep_curves(topo, collective: str, lo: int = 1 << 10, hi: int = 1 << 30,
                 points: int = CURVE_POINTS) -> dict:
    """Every candidate's time over sizes by the page's one model, and where the fastest changes.

    A flow-level time is affine in the size (latencies fixed, every byte count scales), so the
    crossovers are exact intersections of each candidate's line through its two end points.
    """
    from hcf_sim.collectives.selector import candidates, envelope_crossovers
    from hcf_sim.service import simulate as sim
    from hcf_sim.service import topology_params
    from hcf_sim.simulation.flowsim import Router

    p = len(topo.gpus)
    _, _, group = topology_params(topo, "Simple", 0.0, p)
    router = Router(topo)
    sizes = [lo * (hi / lo) ** (i / (points - 1)) for i in range(points)]
    auto = [sim(topo, collective, s, "auto", METHOD, routing=ROUTING, router=router) for s in sizes]
    nccl = bool(auto) and auto[0].model.startswith("NCCL")
    named = by_algorithm(auto[0].alternatives) if nccl else {}
    # NCCL's algorithms are drawn as the page times them (their best protocol per size); the
    # textbook schedules NCCL does not run keep their own lines, and only those (affine in the
    # size) give the exact crossovers
    times = {a: [by_algorithm(r.alternatives)[a] for r in auto] for a in named}
    algos = [a for a in candidates(collective, p, group) if a not in named]
    textbook = {a: [sim(topo, collective, s, a, METHOD, routing=ROUTING, router=router).time
                    for s in sizes] for a in algos}
    times.update(textbook)
    lines = {a: (t[0] - (t[-1] - t[0]) / (hi - lo) * lo, (t[-1] - t[0]) / (hi - lo))
             for a, t in textbook.items()}
    cross = [{"size": c.size, "frm": c.frm, "to": c.to,
              "time_s": lines[c.to][0] + lines[c.to][1] * c.size}
             for c in (envelope_crossovers(lines, lo, hi) if len(lines) > 1 else [])]
    if nccl:
        times["auto (NCCL tuner)"] = [r.time for r in auto]
    return {"sizes": sizes, "times": times, "crossovers": cross}


def resolve_element(topo, element: list) -> tuple[str, str]:
    """A clicked ['link', 'u,v'] or ['node', name] as the fault hcf_sim applies (kind, target)."""
    from hcf_sim.errors import HcfError

    if not isinstance(element, list | tuple) or len(element) != 2:
        raise HcfError("click a link or a node of the topology to fail it")
    kind, target = (str(x) for x in element)
    if kind == "node":
        if target not in topo.graph:
            raise HcfError(f"{target!r} is not in {topo.name} (already failed?)")
        kind = "node" if topo.graph.nodes[target].get("kind") == "gpu" else "switch"
    if kind == "switch" and topo.graph.nodes[target].get("kind") == "nic":
        # a NIC is not a switch to hcf_sim: failing it is failing its GPU's only uplink
        gpu = next(n for n in topo.graph.neighbors(target)
                   if topo.graph.nodes[n].get("kind") == "gpu")
        kind, target = "link", f"{gpu},{target}"
    return kind, target


def fault(topo, element: list, collective: str, size: float, algorithm: str,
          codec: str = "none") -> dict:
    """Fail a clicked element; before/after by the page's model, the fault applied and the re-plan.

    `size` is the logical size: the wire ratio is applied here as in `simulate`, so the fault's
    'before' is the page's headline.
    """
    from hcf_sim.faults import fault_scenario

    kind, target = resolve_element(topo, element)
    ratio = wire_ratio(codec, len(topo.gpus))
    rep = fault_scenario(topo, kind, target, collective, max(1.0, size * ratio), algorithm,
                         METHOD, routing=ROUTING, top_links=topo.graph.number_of_edges() * 2).to_dict()
    for side in ("before", "after"):
        _finish(rep[side], codec, wire_ratio(codec, rep[side]["ranks"]), size)
    rep["applied"] = [kind, target]
    return rep


def overlap(topo, collective_algo: str, kind: str, stages: int = 4, microbatches: int = 8,
            layers: int = 8, layer_mib: float = 4.0) -> dict:
    """Per-rank Gantt rows of a DDP step (bucketed all-reduces) or a pipeline schedule."""
    from hcf_sim.service import simulate as sim
    from hcf_sim.simulation.flowsim import Router

    # the same model as the Result panel; buckets repeat sizes, so each size is simulated once
    router, known = Router(topo), {}

    def allreduce_s(nbytes: float) -> float:
        size = max(1.0, nbytes)
        if size not in known:
            known[size] = sim(topo, "allreduce", size, collective_algo, METHOD, routing=ROUTING,
                              router=router).time
        return known[size]

    if kind == "ddp":
        from hcf_sim.simulation.overlap import ddp_step

        nbytes = [int(layer_mib * (1 << 20))] * layers
        # backward per layer sized so compute and communication are of the same order
        bwd = [max(allreduce_s(b), 1e-6) * 0.8 for b in nbytes]
        r = ddp_step(nbytes, bwd, sum(bwd) / 2, 25.0, allreduce_s, rank_slowdown=(1.0, 1.0))
        summary = (f"DDP step {r.step_time * 1e3:.2f} ms: compute {r.compute_time * 1e3:.2f} ms, "
                   f"comm {r.comm_time * 1e3:.2f} ms of which {r.exposed_comm * 1e3:.2f} ms "
                   f"exposed ({r.overlap_fraction:.0%} hidden), {len(r.buckets)} buckets")
    else:
        from hcf_sim.pipelines.simulator import simulate_pipeline

        p2p = (sim(topo, "broadcast", 1 << 20, "tree", METHOD, routing=ROUTING, router=router).time
               if len(topo.gpus) > 1 else 0.0)
        r = simulate_pipeline(stages, microbatches, kind, 1e-3, 2.0, p2p, 2,
                              allreduce_s(64 << 20))
        summary = (f"{kind}: {stages} stages x {microbatches} micro-batches, makespan "
                   f"{r.makespan * 1e3:.2f} ms, utilisation {r.utilisation:.0%} (textbook bubble "
                   f"{r.ideal_bubble_fraction:.0%})")
    rows = [{"rank": f"rank {e.rank}", "name": e.label, "start": e.start,
             "duration": e.end - e.start, "kind": e.kind} for e in r.events]
    return {"rows": rows, "summary": summary}


def measure_gloo(sizes: list[int], ranks: int = 2, iters: int = 5,
                 timeout: float = MEASURE_TIMEOUT_S, target: str = "host") -> dict:
    """Real all-reduce on `ranks` gloo processes, fitted alpha-beta, predicted rows. With
    `uol serve --broker` and a live worker of `target` it runs on that worker's machine,
    else here in a child process; "ran_on" says which."""
    from app.services import remote
    from hcf_sim.calibration.alpha_beta import fit_alpha_beta
    from uol_core.hfl import HflError, target_name

    try:
        target_name(target)  # a client's value: a listed target, before any process starts
    except HflError as exc:
        return {"ok": False, "error": str(exc)}
    task = {"kind": "allreduce", "sizes": sizes, "iters": iters, "warmup": 2}
    res = remote.gloo_on_worker(task, ranks, target, timeout)
    if res is None:
        code = ("import json, sys\nfrom hcf_sim.runtime.gloo import run_local\n"
                "t = json.loads(sys.argv[1])\n"
                f"print({MARK!r} + json.dumps(run_local(t, int(sys.argv[2]))))\n")
        res = run_json_child(["-c", code, json.dumps(task), str(ranks)], MARK, None, timeout,
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
    return {"ok": True, "rows": out, "alpha": a, "beta": b, "ranks": ranks,
            "ran_on": remote.ran_on(res) or "this machine", "worker": res.get("worker")}
