"""Sigmoid-family activations without a division: UOL's C kernels with `uol_recipf` (a
bit-trick guess and three Newton steps, c/text/vmath.py) against the same kernels with the
division, and torch's own kernel, calls alternated in one run. SiLU and GELU-tanh use the
reciprocal; a bare sigmoid, where it measured slower, keeps the division (its row times both).

Run: `.venv/bin/python benchmarks/activation_recip.py [--rounds N] [--model NAME]`.
Writes docs/benchmarks/activation_recip.json. The division form is rebuilt here by swapping
the expression table (c/text/expr.py FUNCS) for one build; both builds share everything else.
The whole-model row runs a zoo model's compiled graph both ways (its conv epilogues apply SiLU).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from uol_core import api  # noqa: E402
from uol_core.backends.c.text import expr  # noqa: E402
from uol_core.graph import route  # noqa: E402
from uol_core.hfl.sysinfo import host_info  # noqa: E402

# The expressions as they were, each with a division (the reference for the ratio).
DIVISION = {
    "sigmoid": "(1.0f / (1.0f + uol_expf(-({0}))))",  # the form it keeps
    "silu": "(({0}) * (1.0f / (1.0f + uol_expf(-({0})))))",
    "gelu_tanh": "(({0}) * (1.0f / (1.0f + uol_expf(-1.5957691216057308f * (({0}) + 0.044715f "
                 "* ({0}) * ({0}) * ({0}))))))",
}
# The reciprocal forms (as c/text/expr.py has them, sigmoid's as it would be).
RECIP = {
    "sigmoid": "uol_recipf(1.0f + uol_expf(-({0})))",
    "silu": "(({0}) * uol_recipf(1.0f + uol_expf(-({0}))))",
    "gelu_tanh": "(({0}) * uol_recipf(1.0f + uol_expf(-1.5957691216057308f * (({0}) + "
                 "0.044715f * ({0}) * ({0}) * ({0})))))",
}
TORCH = {"sigmoid": torch.sigmoid, "silu": F.silu,
         "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


@contextmanager
def expression_form(form: dict[str, str]):
    """The C backend emits `form`'s expressions inside the block (caches cleared both ways)."""
    saved = dict(expr.FUNCS["float"])
    expr.FUNCS["float"].update(form)
    route._EMIT_CACHE.clear()
    route._ROUTE_CACHE.clear()
    try:
        yield
    finally:
        expr.FUNCS["float"].clear()
        expr.FUNCS["float"].update(saved)
        route._EMIT_CACHE.clear()
        route._ROUTE_CACHE.clear()


def alternate(fns: dict, rounds: int, inner: int) -> dict[str, list[float]]:
    """Per-round seconds of each contender, the contenders alternated within every round."""
    out: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            out[name].append((time.perf_counter() - start) / inner)
    return out


def ratio_summary(before: list[float], after: list[float]) -> dict:
    """before / after per round: its median and interquartile range (>1: `after` is faster)."""
    ratios = sorted(b / a for b, a in zip(before, after, strict=True))
    q = statistics.quantiles(ratios, n=4)
    return {"median": statistics.median(ratios), "q1": q[0], "q3": q[2]}


def host_fields() -> dict:
    """The host a run's JSON names: CPU model, vector ISA flags, machine, torch threads."""
    info = host_info()
    return {"host": info.model,
            "isa": [f for f in ("avx512f", "avx2", "fma", "asimd", "sve") if f in info.flags],
            "machine": platform.machine(), "threads": torch.get_num_threads()}


def spread(r: dict, digits: int = 2) -> str:
    """A ratio summary as `median (q1-q3)`."""
    return f"{r['median']:.{digits}f} ({r['q1']:.{digits}f}-{r['q3']:.{digits}f})"


def activation_rows(n: int, rounds: int) -> list[dict]:
    x = torch.randn(n) * 4
    rows = []
    for name in DIVISION:
        text = f"op act_{name}(X: f32[N]) -> Y: f32[N]:\n    Y[i] = {name}(X[i])\n"
        with expression_form(RECIP):
            new = api.compile(text, {"X": (n,)})
        with expression_form(DIVISION):
            old = api.compile(text, {"X": (n,)})
        want = TORCH[name](x)
        for kernel in (new, old):
            got = kernel(X=x)
            torch.testing.assert_close(got, want, rtol=2e-6, atol=1e-6)
        times = alternate({"division": lambda k=old: k(X=x), "recip": lambda k=new: k(X=x),
                           "torch": lambda f=TORCH[name]: f(x)}, rounds, 20)
        rows.append({"activation": name, "n": n,
                     "median_us": {k: statistics.median(v) * 1e6 for k, v in times.items()},
                     "division_over_recip": ratio_summary(times["division"], times["recip"]),
                     "torch_over_recip": ratio_summary(times["torch"], times["recip"])})
    return rows


def model_row(name: str, rounds: int) -> dict:
    from uol_core.graph.named import import_zoo_model
    from uol_core.graph.run import compile_graph, make_inputs

    graph, _module, _inputs = import_zoo_model(name, "bench", 1)
    env = make_inputs(graph)
    with expression_form(RECIP):
        new = compile_graph(graph, "c", "host", True)
        new(env)  # builds its kernels with the reciprocal forms
    with expression_form(DIVISION):
        old = compile_graph(graph, "c", "host", True)
        old(env)  # builds and verifies against the module, with the division form's kernels
    times = alternate({"division": lambda: old(env), "recip": lambda: new(env)}, rounds, 3)
    return {"model": name, "batch": 1,
            "median_ms": {k: statistics.median(v) * 1e3 for k, v in times.items()},
            "division_over_recip": ratio_summary(times["division"], times["recip"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--n", type=int, default=1 << 16, help="elements (L2-resident default)")
    parser.add_argument("--model", default="efficientnet_b0", help="zoo model ('' to skip)")
    args = parser.parse_args()
    torch.manual_seed(0)
    result = {**host_fields(), "activations": activation_rows(args.n, args.rounds),
              "model": model_row(args.model, args.rounds) if args.model else None,
              "command": "python benchmarks/activation_recip.py " + " ".join(sys.argv[1:])}
    out = ROOT / "docs" / "benchmarks" / "activation_recip.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    for row in result["activations"]:
        print(f"{row['activation']:10s} division/recip {spread(row['division_over_recip'])}  "
              f"torch/recip {spread(row['torch_over_recip'])}")
    if result["model"]:
        print(f"{args.model} b1 division/recip {spread(result['model']['division_over_recip'], 3)} "
              f"{result['model']['median_ms']}")


if __name__ == "__main__":
    main()
