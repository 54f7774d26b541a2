"""Partial sums in the generic C path's reductions: each kernel built with them (the target's
fma_latency_cycles x fma_units sums, c/text/expr.py `_split_reduce`) against the same kernel
with one sum, and torch's own kernel, calls alternated in one run.

Run: `.venv/bin/python benchmarks/reduction_sums.py [--rounds N] [--model NAME]`.
Writes docs/benchmarks/reduction_sums.json. The one-sum build is the same emitter with
`reduction_chains` answering 1 for one build (route caches cleared both ways); both builds
share everything else. The whole-model row runs a zoo model's compiled graph both ways.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from activation_recip import alternate, host_fields, ratio_summary, spread  # noqa: E402

from uol_core import api  # noqa: E402
from uol_core.backends.c.loops import generic  # noqa: E402
from uol_core.graph import route  # noqa: E402
from uol_core.ops import op_text  # noqa: E402


@contextmanager
def one_sum():
    """The generic emitter keeps one accumulator per reduction inside the block."""
    saved = generic.reduction_chains
    generic.reduction_chains = lambda target: 1
    route._EMIT_CACHE.clear()
    route._ROUTE_CACHE.clear()
    try:
        yield
    finally:
        generic.reduction_chains = saved
        route._EMIT_CACHE.clear()
        route._ROUTE_CACHE.clear()


def _rms(x, g):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g


# (label, ODL op, input shapes, torch's call on the same tensors)
CASES = [
    ("layernorm 197x768 (ViT-B)", op_text("layernorm"), {"X": (197, 768), "gamma": (768,), "beta": (768,)},
     lambda t: F.layer_norm(t["X"], (768,), t["gamma"], t["beta"])),
    ("rmsnorm 128x4096 (Llama)", op_text("rmsnorm"), {"X": (128, 4096), "gamma": (4096,)},
     lambda t: _rms(t["X"], t["gamma"])),
    ("row sum 1024x1024", "op row_sum(X: f32[R, C]) -> Y: f32[R]:\n    Y[r] = sum[c](X[r, c])\n",
     {"X": (1024, 1024)}, lambda t: t["X"].sum(-1)),
]


def op_rows(rounds: int) -> list[dict]:
    rows = []
    for label, text, shapes, reference in CASES:
        tensors = {k: torch.randn(*v) for k, v in shapes.items()}
        new = api.compile(text, shapes)
        with one_sum():
            old = api.compile(text, shapes)
        want = reference(tensors)
        for kernel in (new, old):
            torch.testing.assert_close(kernel(**tensors), want, rtol=1e-4, atol=1e-4)
        t, ref = tensors, reference
        times = alternate({"one_sum": lambda k=old, t=t: k(**t), "partial_sums": lambda k=new, t=t: k(**t),
                           "torch": lambda f=ref, t=t: f(t)}, rounds, 20)
        rows.append({"case": label, "median_us": {k: statistics.median(v) * 1e6 for k, v in times.items()},
                     "one_over_partial": ratio_summary(times["one_sum"], times["partial_sums"]),
                     "torch_over_partial": ratio_summary(times["torch"], times["partial_sums"])})
    return rows


def model_row(name: str, rounds: int) -> dict:
    from uol_core.graph.named import import_zoo_model
    from uol_core.graph.run import compile_graph, make_inputs

    graph, _module, _inputs = import_zoo_model(name, "bench", 1)
    env = make_inputs(graph)
    new = compile_graph(graph, "c", "host", True)
    new(env)  # builds and verifies against the module
    with one_sum():
        old = compile_graph(graph, "c", "host", True)
        old(env)
    times = alternate({"one_sum": lambda: old(env), "partial_sums": lambda: new(env)}, rounds, 3)
    return {"model": name, "batch": 1,
            "median_ms": {k: statistics.median(v) * 1e3 for k, v in times.items()},
            "one_over_partial": ratio_summary(times["one_sum"], times["partial_sums"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--model", default="vit_b16", help="zoo model ('' to skip)")
    args = parser.parse_args()
    torch.manual_seed(0)
    result = {**host_fields(), "ops": op_rows(args.rounds),
              "model": model_row(args.model, args.rounds) if args.model else None,
              "command": "python benchmarks/reduction_sums.py " + " ".join(sys.argv[1:])}
    out = ROOT / "docs" / "benchmarks" / "reduction_sums.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    for row in result["ops"]:
        print(f"{row['case']:28s} one/partial {spread(row['one_over_partial'])}  "
              f"torch/partial {spread(row['torch_over_partial'])}  {row['median_us']}")
    if result["model"]:
        print(f"{args.model} b1 one/partial {spread(result['model']['one_over_partial'], 3)} "
              f"{result['model']['median_ms']}")


if __name__ == "__main__":
    main()
