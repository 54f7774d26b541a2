"""Transformer block end to end: UOL graph (fused, C kernels where the backend emits) vs torch eager
and torch.compile of the same module, in one run; writes docs/benchmarks/graph.json.

    python benchmarks/graph_bench.py [--seq 512 --hidden 512 --heads 8 --mlp 2048 --repeat 10]

Goals (issue 11): >= 1.5x torch eager and >= 1.2x torch.compile, output verified. Groups run on
whatever the backend emits today (see uol_core/graph/route.py), so faster kernels are picked up
with no change here.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from uol_core.graph import examples, run_graph
from uol_core.graph.fx_import import import_module
from uol_core.graph.run import compile_graph, make_inputs

OUT = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "graph.json"


def interleaved_ms(fns: dict, rounds: int) -> dict:
    """Median ms of each contender, calls alternated round by round after a warm-up call each,
    so that load from other processes on the shared cores hits every contender alike."""
    for fn in fns.values():
        fn()
    times: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(v) * 1e3 for name, v in times.items()}


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
    args = ap.parse_args()
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
