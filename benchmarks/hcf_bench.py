"""HCF benchmark: simulator speed, 128-node claims, gloo validation errors and compression figures -> docs/benchmarks/hcf.json."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from hcf_sim.collectives.analytical import AlphaBeta, analytical_cost
from hcf_sim.fabric.links import get_preset
from hcf_sim.fabric.topology import build_topology
from hcf_sim.pipelines.simulator import simulate_pipeline
from hcf_sim.service import simulate


def _best(fn, reps: int = 3) -> float:
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def sim_speed(baseline: str | None = None) -> dict:
    """Wall time of one 1024-GPU fat-tree all-reduce: flow-level (incl. routing) and analytical.

    `textbook_all_s` is every textbook schedule flow by flow on one routing table (what 'auto'
    ran before NCCL's tuner chose); with `baseline` (a git revision) the same work runs on that
    revision's flow simulator too, alternating in one process, so the ratio is load-independent.
    """
    from hcf_sim.collectives.selector import candidates
    from hcf_sim.simulation import flowsim

    ft = build_topology("fat-tree", 1024)
    out: dict = {"topology": ft.summary()}
    for algo in ("ring", "rabenseifner", "auto"):
        out[f"flow_{algo}_s"] = _best(lambda a=algo: simulate(ft, "allreduce", 64 << 20, a, "flow"), 2)
    out["analytical_auto_s"] = _best(lambda: simulate(ft, "allreduce", 64 << 20, "auto", "analytical"), 5)

    def textbook(mod) -> list[float]:
        router = mod.Router(ft)
        return [mod.flow_simulate(ft, "allreduce", a, 64 << 20, routing="ecmp", router=router).time
                for a in candidates("allreduce", 1024, 1)]

    out["textbook_all_s"] = _best(lambda: textbook(flowsim), 2)
    if baseline:
        old = _module_at(baseline, "hcf_sim/simulation/flowsim.py")
        assert textbook(old) == textbook(flowsim), "the same flows must give the same times"
        runs: dict[str, list[float]] = {"baseline": [], "now": []}
        for _ in range(3):
            for name, mod in (("baseline", old), ("now", flowsim)):
                t0 = time.perf_counter()
                textbook(mod)
                runs[name].append(time.perf_counter() - t0)
        out["textbook_vs_baseline"] = {"revision": baseline, **runs, "speedup_of_medians":
                                       statistics.median(runs["baseline"]) / statistics.median(runs["now"])}
    return out


def _module_at(revision: str, path: str):
    import importlib.util
    import subprocess
    import sys
    import tempfile

    text = subprocess.run(["git", "show", f"{revision}:{path}"], check=True, capture_output=True,
                          text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location("flowsim_baseline", f.name)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["flowsim_baseline"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def claims_128_nodes() -> dict:
    """128 servers x 8 GPUs, rail-optimised (NVLink4 islands, NDR rails): best algorithm vs a flat ring per size."""
    rail = build_topology("rail", 1024)
    rows = []
    for size in (8 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30):
        ring = simulate(rail, "allreduce", size, "ring", "flow")
        best = min((simulate(rail, "allreduce", size, a, "flow")
                    for a in ("tree", "recursive_doubling", "rabenseifner", "hierarchical")), key=lambda r: r.time)
        rows.append({"size": size, "flat_ring_us": ring.time * 1e6, "best": best.algorithm,
                     "best_us": best.time * 1e6, "latency_reduction": 1 - best.time / ring.time,
                     "best_busbw_GBps": best.busbw / 1e9, "bus_utilisation_vs_NDR_line": best.busbw / 50e9})
    return {"topology": rail.summary(), "method": "flow-level, ECMP, Simple protocol", "rows": rows}


def pipeline_7_stages() -> dict:
    """7 stages x m micro-batches, 1F1B, 16 DP replicas, 100 MB of gradients per stage over NDR."""
    lk = get_preset("ib_ndr")
    ab = AlphaBeta(lk.step_latency["Simple"] + 2 * lk.hop_latency, 1 / lk.bandwidth)
    ar = analytical_cost("allreduce", "ring", 16, 100e6, ab).total
    rows = []
    for m in (7, 28, 56, 112):
        for sch in ("1f1b", "interleaved"):
            if sch == "interleaved" and m % 7:
                continue
            r = simulate_pipeline(7, m, sch, 1e-3, 2.0, 10e-6, 2, ar)
            rows.append({"microbatches": m, "schedule": sch, "utilisation": r.utilisation,
                         "ideal_without_comm": 1 - r.ideal_bubble_fraction})
    return {"fwd_ms": 1.0, "bwd_ratio": 2.0, "p2p_us": 10.0, "dp_allreduce_ms": ar * 1e3, "rows": rows}


def main() -> None:
    """Run every part (or --quick for the simulator only) and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="simulator figures only (no gloo processes)")
    ap.add_argument("--out", default="docs/benchmarks/hcf.json")
    ap.add_argument("--baseline", help="a git revision whose flow simulator to time beside this one")
    ap.add_argument("--speed-only", action="store_true", help="the simulator's speed only")
    args = ap.parse_args()
    if args.speed_only:
        print(json.dumps(sim_speed(args.baseline), indent=1))
        return
    res: dict = {"sim_speed": sim_speed(args.baseline), "claims_128_nodes": claims_128_nodes(), "pipeline_7": pipeline_7_stages()}
    if not args.quick:
        from hcf_sim.calibration.alpha_beta import validate
        from hcf_sim.errors import parse_sizes
        from hcf_sim.runtime.training import CODECS, compare
        v = validate([2, 3, 4], parse_sizes("4KiB:16MiB"), 15)
        res["validation"] = {k: v[k] for k in ("median_error_large", "median_error_small",
                                                "geomean_error_large", "geomean_error_small",
                                                "oversubscription_eta", "method", "cores", "torch")}
        res["validation"]["rows"] = v["rows"]
        res["validation"]["median_error_by_ranks"] = {
            p: statistics.median([r["error"] for r in v["rows"] if r["ranks"] == p]) for p in (2, 3, 4)}
        res["compression"] = compare(list(CODECS), 2, 8)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k != "validation"}, indent=1)[:6000])
    if "validation" in res:
        print("validation", res["validation"]["median_error_large"], res["validation"]["median_error_small"])


if __name__ == "__main__":
    main()
