"""Transformer block end to end: UOL graph (fused, C kernels where the backend emits) vs torch eager
and torch.compile of the same module, in one run; writes docs/benchmarks/graph.json.

    python benchmarks/graph_bench.py [--seq 512 --hidden 512 --heads 8 --mlp 2048 --repeat 10]
    python benchmarks/graph_bench.py --zoo [--zoos hand,library --models silu_mlp,bert_base
        --batches 1,8 --repeat 5]

`--zoo` imports every model of uol_core/graph/zoo.py with torch.export, runs it whole through UOL,
verifies it against the module and times UOL, torch eager and torch.compile alternately in one
run at each batch size (docs/benchmarks/graph_zoo.json and the "Graph model zoo" section), with
ONNX Runtime and OpenVINO beside them where installed. The library zoo (uol_core/graph/hf_zoo.py)
runs against all four deployment runtimes in graph_library_zoo.py (graph_library.json and the
"Library models against the deployment runtimes" section).

Goals (issue 11): >= 1.5x torch eager and >= 1.2x torch.compile, output verified. Groups run on
whatever the backend emits today (see uol_core/graph/route.py), so faster kernels are picked up
with no change here.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import time
from pathlib import Path

import torch

from uol_core.graph import examples, run_graph
from uol_core.graph.fx_import import import_module
from uol_core.graph.peers import prepare_peers, verify_peers
from uol_core.graph.run import (
    compile_graph,
    interleaved_ms,
    interleaved_times,
    make_inputs,
    max_error,
)
from uol_core.runtime.turns import PEER_LEAD_IN_S

OUT = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "graph.json"


def torch_compiled(module, x) -> tuple:
    """torch.compile of the same module (inductor) and its compile seconds; (None, error) when
    it cannot run (no C++ toolchain for inductor, etc.): report, do not fail the bench."""
    try:
        compiled = torch.compile(module)
        with torch.no_grad():
            start = time.perf_counter()
            compiled(x)
            return compiled, {"compile_s": time.perf_counter() - start}
    except Exception as err:
        return None, {"ms": None, "error": str(err).splitlines()[0][:200]}


def write_section(result: dict, compiled: dict) -> None:
    """The "Graphs" section of docs/benchmarks.md, from this run."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from docs_section import write_report

    slowest = sorted(result["rows"], key=lambda r: -r["ms"])[:5]
    lines = [f"Command: `{result['command']}` ({time.strftime('%Y-%m-%d %H:%M')}, "
             f"{result['host']['threads']} threads). Transformer block, seq "
             f"{result['shape']['seq']}, hidden {result['shape']['hidden']}, "
             f"{result['shape']['heads']} heads, MLP {result['shape']['mlp']}, fp32, batch 1; "
             f"output verified: {result['verified']} (max relative error "
             f"{result['max_rel_error']:.1e}).", "",
             "| UOL ms | torch eager ms | torch.compile ms | x eager | x compile |",
             "|---|---|---|---|---|",
             f"| {result['uol_ms']:.1f} | {result['torch_eager_ms']:.1f} | "
             f"{compiled.get('ms') or float('nan'):.1f} | {result['speedup_vs_eager']:.2f} | "
             f"{result['speedup_vs_compile'] or float('nan'):.2f} |", "",
             "Slowest groups: " + "; ".join(f"{r['group']} ({r['engine']}) {r['ms']:.1f} ms"
                                            for r in slowest) + "."]
    write_report("Graphs", result, lines, slug="graph")


def zoo_row(name: str, batch: int, rounds: int, backend: str, with_compile: bool) -> dict:
    """One zoo model at one batch size: import, verify, then UOL / eager / compile alternated."""
    from uol_core.graph.export_import import export_module
    from uol_core.graph.zoo import build

    module, x = build(name, "bench", batch)
    start = time.perf_counter()
    graph = export_module(module, x)
    ours = compile_graph(graph, backend, "host")
    ours.verify = False  # verified below into the row (a mismatch is a row, not an exception)
    build_s = time.perf_counter() - start
    env = make_inputs(graph, 0)
    env[next(iter(graph.inputs))] = x
    with torch.no_grad():
        error = max_error(ours(env), dict(zip(graph.outputs, (module(x),))))
        fns = {"uol": lambda: ours(env), "eager": lambda: module(x)}
        compiled, info = torch_compiled(module, x) if with_compile else (None, {"skipped": True})
        if compiled is not None:
            fns["compile"] = lambda: compiled(x)
        peers = prepare_peers(module, (x,), ("onnxruntime", "openvino"))
        reasons = verify_peers(peers, module(x))  # an unverified runtime is reported, not timed
        fns.update({k: p.call for k, p in peers.items() if reasons[k] is None})
        times = interleaved_times(fns, rounds, PEER_LEAD_IN_S)
        ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        best = {k: min(v) * 1e3 for k, v in times.items()}
        faults = {k: faults_per_call(fn) for k, fn in fns.items()}
        out = {graph.outputs[0]: torch.empty_like(module(x))}
        faults["uol_into_caller_buffer"] = faults_per_call(lambda: ours(env, out=out))
    opaque = [n.source for n in graph.nodes if n.kind == "torch" and n.label.startswith("opaque")]
    engines = [compiled_route.engine for compiled_route in ours.routes.values()]
    runner = ours.runner(env)
    stats = runner.stats
    return {"model": name, "batch": batch, "input": list(x.shape), "nodes": len(graph.nodes),
            "groups": len(ours.plan.groups), "opaque": opaque, "verified": error <= 1e-3,
            "max_rel_error": error, "c_groups": engines.count("c"), "build_s": build_s,
            "uol_ms": ms["uol"], "eager_ms": ms["eager"], "compile_ms": ms.get("compile"),
            "compile_info": info, "x_eager": ms["eager"] / ms["uol"],
            "onnxruntime_ms": ms.get("onnxruntime"), "openvino_ms": ms.get("openvino"),
            "peer_notes": {k: reasons[k] or p.note for k, p in peers.items()},
            "x_best_peer": min(ms[k] for k in ms if k != "uol") / ms["uol"],
            "x_compile": ms["compile"] / ms["uol"] if "compile" in ms else None,
            "best_ms": best, "x_eager_best": best["eager"] / best["uol"],
            "x_compile_best": best["compile"] / best["uol"] if "compile" in best else None,
            "page_faults_per_call": faults, "kernels": stats.kernels, "copies": stats.copies,
            "torch_calls": stats.calls, "driver_calls": stats.segments,
            "arena_bytes": stats.memory.arena_bytes, "naive_bytes": stats.memory.naive_bytes,
            "huge_pages": stats.huge_pages, "dispatch_overhead_us": runner.overhead_us(),
            "view_folds": sum(d["folded"] for d in ours.plan.view_folds),
            "sibling_gemms": sum(d["merged"] for d in ours.plan.siblings)}


def faults_per_call(fn, calls: int = 10) -> float:
    """Page faults (getrusage) per call of `fn` in steady state (after one warm call)."""
    from uol_core.graph.planned import page_faults

    fn()
    before = page_faults()
    for _ in range(calls):
        fn()
    return (page_faults() - before) / calls


def run_zoo(args) -> None:
    """Every zoo model at every batch size; JSON, a table in docs/benchmarks.md, and stdout."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from docs_section import write_report

    from uol_core.graph.zoo import MODELS

    zoos = args.zoos.split(",")
    if "library" in zoos:
        from graph_library_zoo import run_library

        run_library(args, shlex.join(["python", *sys.argv]))
    names = [n for n in args.models.split(",") if n in MODELS] if args.models else list(MODELS)
    if "hand" not in zoos or not names:
        return
    batches = [int(b) for b in args.batches.split(",")]
    rows = []
    for name in names:
        for batch in batches:
            row = zoo_row(name, batch, args.repeat, args.backend, not args.no_compile)
            rows.append(row)
            print(f"{name:<18} b{batch} uol {row['uol_ms']:8.2f} ms | eager {row['eager_ms']:8.2f} "
                  f"({row['x_eager']:.2f}x) | compile {row['compile_ms'] or float('nan'):8.2f} "
                  f"({row['x_compile'] or float('nan'):.2f}x) | ORT {row['onnxruntime_ms'] or float('nan'):8.2f} "
                  f"| OpenVINO {row['openvino_ms'] or float('nan'):8.2f} | best peer "
                  f"{row['x_best_peer']:.2f}x | verified {row['verified']}", flush=True)
    x_eager = [r["x_eager"] for r in rows]
    x_compile = [r["x_compile"] for r in rows if r["x_compile"]]
    report = {"benchmark": "model zoo end to end (CPU fp32)", "command": shlex.join(["python", *sys.argv]),
              "host": {"machine": platform.machine(), "threads": torch.get_num_threads(),
                       "torch": torch.__version__, "cpu": _cpu_name(), "isa": _isa()},
              "rows": rows, "median_x_eager": statistics.median(x_eager),
              "median_x_compile": statistics.median(x_compile) if x_compile else None,
              "median_x_best_peer": statistics.median(r["x_best_peer"] for r in rows),
              "goal": {"median_x_eager": 1.3, "median_x_compile": 1.1, "min_x_eager": 1.0}}
    if args.models or args.no_compile:  # a partial run does not replace the published table
        print(json.dumps({k: report[k] for k in ("median_x_eager", "median_x_compile")}))
        return
    lines = [f"Command: `{report['command']}` ({time.strftime('%Y-%m-%d %H:%M')}, "
             f"{report['host']['cpu']}, vector ISA {report['host']['isa']}, "
             f"{report['host']['threads']} threads). Each model imported with torch.export "
             "(random weights), run whole on the C backend through the memory-planned runtime, "
             "verified against the module, then UOL, torch eager and torch.compile called "
             f"alternately, median of {args.repeat} rounds. Faults: page faults per steady-state "
             "call (getrusage) for UOL writing into a caller's buffer / torch eager. Arena: bytes "
             "of the planned arena / one allocation per intermediate. Overhead: dispatch cost per "
             "kernel with every kernel replaced by an empty function.", "",
             "| model | batch | kernels | copies | verified | UOL ms | eager ms | compile ms "
             "| ORT ms | OpenVINO ms | x eager | x compile | x best peer | x eager (best) "
             "| x compile (best) | faults UOL / eager | arena / naive KiB | overhead us/kernel |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = r["page_faults_per_call"]
        per_kernel = r["dispatch_overhead_us"]["per_kernel_us"]
        lines.append(f"| {r['model']} | {r['batch']} | {r['kernels']} | {r['copies']} | "
                     f"{r['verified']} | {r['uol_ms']:.2f} | {r['eager_ms']:.2f} | "
                     f"{r['compile_ms'] or float('nan'):.2f} | "
                     f"{r['onnxruntime_ms'] or float('nan'):.2f} | "
                     f"{r['openvino_ms'] or float('nan'):.2f} | {r['x_eager']:.2f} | "
                     f"{r['x_compile'] or float('nan'):.2f} | {r['x_best_peer']:.2f} | "
                     f"{r['x_eager_best']:.2f} | "
                     f"{r['x_compile_best'] or float('nan'):.2f} | "
                     f"{f['uol_into_caller_buffer']:.1f} / {f['eager']:.1f} | "
                     f"{r['arena_bytes'] / 1024:.0f} / {r['naive_bytes'] / 1024:.0f} | "
                     f"{per_kernel if per_kernel is not None else float('nan'):.2f} |")
    met = {"median x eager >= 1.3": report["median_x_eager"] >= 1.3,
           "median x compile >= 1.1": (report["median_x_compile"] or 0) >= 1.1,
           "no model below 1.0x eager": min(x_eager) >= 1.0,
           "0 page faults per call": all(r["page_faults_per_call"]["uol_into_caller_buffer"] == 0
                                         for r in rows)}
    report["goals_met"] = met
    best_eager = statistics.median(r["x_eager_best"] for r in rows)
    best_compile = [r["x_compile_best"] for r in rows if r["x_compile_best"]]
    report["median_x_eager_best"] = best_eager
    report["median_x_compile_best"] = statistics.median(best_compile) if best_compile else None
    lines += ["", f"Median over the zoo: {report['median_x_eager']:.2f}x torch eager, "
              f"{report['median_x_compile'] or float('nan'):.2f}x torch.compile, "
              f"{report['median_x_best_peer']:.2f}x the best of eager, torch.compile, ONNX "
              "Runtime and OpenVINO (from each "
              f"contender's median call); {best_eager:.2f}x and "
              f"{report['median_x_compile_best'] or float('nan'):.2f}x from each contender's "
              "fastest call (less sensitive to other jobs on the host). Goals (medians): "
              + "; ".join(f"{k}: {'met' if v else 'not met'}" for k, v in met.items()) + "."]
    section = args.section or "Graph model zoo"
    write_report(section, report, lines, slug=None if args.section else "graph_zoo")


def _isa() -> str:
    """The widest vector ISA of this host, as the HFL's host detection reports it."""
    from uol_core.hfl.sysinfo import host_info, widest_vector_isa

    isa = widest_vector_isa(host_info().flags)
    return f"{isa.get('flag', 'unknown')} ({isa.get('vector_bits', '?')}-bit)"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    """Run the benchmark and write its JSON."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--mlp", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--backend", default="c")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--zoo", action="store_true", help="every model of uol_core/graph/zoo.py")
    ap.add_argument("--models", default="", help="with --zoo: comma-separated model names")
    ap.add_argument("--batches", default="1,8", help="with --zoo: batch sizes")
    ap.add_argument("--zoos", default="hand,library", help="with --zoo: hand (uol_core/graph/"
                    "zoo.py), library (uol_core/graph/hf_zoo.py against the deployment runtimes)")
    ap.add_argument("--update", action="store_true", help="with --zoo --models: the library "
                    "rows of these models replace the last run's, and the section is rewritten")
    ap.add_argument("--render", action="store_true", help="with --zoo: write the library "
                    "section from its JSON (after an interrupted run)")
    ap.add_argument("--size", default="bench", help="with --zoo --zoos library: bench or small")
    ap.add_argument("--model-timeout", type=int, default=1200, help="with --zoo: seconds per "
                    "library model and batch before it is a row with an error")
    ap.add_argument("--section", default="", help="with --zoo: the docs section to write "
                    "(default 'Graph model zoo'; another host's run keeps its own)")
    args = ap.parse_args()
    if args.zoo:
        run_zoo(args)
        return
    torch.manual_seed(0)
    module = examples.TransformerBlock(args.hidden, args.heads, args.mlp).eval()
    x = torch.randn(1, args.seq, args.hidden)
    graph = import_module(module, x)
    report = run_graph(graph, args.backend, "host", repeat=args.repeat)  # verify, per-group rows
    ours = compile_graph(graph, args.backend, "host")
    env = make_inputs(graph, 0)
    with torch.no_grad():
        fns = {"uol": lambda: ours(env), "eager": lambda: module(x)}
        compiled_module, compiled = (None, {"ms": None, "skipped": True}) if args.no_compile \
            else torch_compiled(module, x)
        if compiled_module is not None:
            fns["compile"] = lambda: compiled_module(x)
        ms = interleaved_ms(fns, max(10, args.repeat))
    total, eager_ms = ms["uol"], ms["eager"]
    if "compile" in ms:
        compiled["ms"] = ms["compile"]
    result = {
        "benchmark": "transformer block end to end (batch 1, fp32)",
        "shape": {"seq": args.seq, "hidden": args.hidden, "heads": args.heads, "mlp": args.mlp},
        "host": {"machine": platform.machine(), "threads": torch.get_num_threads(),
                 "torch": torch.__version__},
        "command": "python benchmarks/graph_bench.py",
        "uol_ms": total, "torch_eager_ms": eager_ms, "torch_compile": compiled,
        "speedup_vs_eager": eager_ms / total,
        "speedup_vs_compile": compiled["ms"] / total if compiled.get("ms") else None,
        "goal": {"vs_eager": 1.5, "vs_compile": 1.2},
        "verified": report["verified"], "max_rel_error": report["max_rel_error"],
        "groups": report["groups"], "nodes": report["nodes"],
        "engines": {e: sum(r["engine"] == e for r in report["rows"]) for e in ("c", "triton", "reference", "torch")},
        "rows": report["rows"], "fusion": report["fusion"],
    }
    result["goal_met"] = bool(result["verified"] and result["speedup_vs_eager"] >= 1.5
                              and (result["speedup_vs_compile"] or 0) >= 1.2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    if args.out == OUT:
        write_section(result, compiled)
    print(f"uol {total:.1f} ms | eager {eager_ms:.1f} ms ({result['speedup_vs_eager']:.2f}x) | "
          f"compile {compiled.get('ms') or float('nan'):.1f} ms "
          f"({(result['speedup_vs_compile'] or float('nan')):.2f}x) | verified {result['verified']}")
    for r in sorted(report["rows"], key=lambda r: -r["ms"])[:6]:
        print(f"  {r['group']:<16} {r['engine']:<9} {r['ms']:8.2f} ms  torch {r['torch_ms']:8.2f} ms")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
