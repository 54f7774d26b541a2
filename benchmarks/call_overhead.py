"""What a compiled kernel's Python call costs beyond the kernel: each op called four ways in one
run, calls alternated round by round: the kernel's entry on prebound pointers ("entry"),
`uol_core.compile(...)` called with its output given ("call, out given") and allocating it
("call"), and torch's own op (allocating, as the module does).

    python benchmarks/call_overhead.py [--rounds 15 --calls 2000 --out FILE]

Small shapes on purpose: the kernel takes a few microseconds, so what the call path adds shows.
Writes docs/benchmarks/call_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from activation_recip import host_fields  # noqa: E402

import uol_core  # noqa: E402
from uol_core.runtime.native import call_entry  # noqa: E402

OUT = ROOT / "docs" / "benchmarks" / "call_overhead.json"


def cases() -> list[tuple[str, str, dict, object]]:
    """(row, op, inputs, torch's call on the same inputs)."""
    x, g, b = torch.randn(2, 64), torch.randn(64), torch.randn(64)
    xv, gv, bv = torch.randn(197, 768), torch.randn(768), torch.randn(768)
    p, q = torch.randn(16, 16), torch.randn(16, 16)
    return [("layernorm [2, 64]", "layernorm", {"X": x, "gamma": g, "beta": b},
             lambda: torch.layer_norm(x, (64,), g, b)),
            ("layernorm [197, 768] (ViT-B)", "layernorm", {"X": xv, "gamma": gv, "beta": bv},
             lambda: torch.layer_norm(xv, (768,), gv, bv)),
            ("add [16, 16]", "add", {"A": p, "B": q}, lambda: torch.add(p, q))]


def contenders(op: str, inputs: dict, reference) -> dict:
    kernel = uol_core.compile(op, shapes={n: tuple(t.shape) for n, t in inputs.items()})
    out = kernel(**inputs)
    native = kernel.native_for({n: tuple(t.shape) for n, t in inputs.items()})
    args = {**inputs, kernel.op.outputs[0].name: out}
    names = [name for name, _, _ in native.launch_args()]
    ptrs = [args[n].data_ptr() for n in names]
    strides = [s for n in names for s in args[n].stride()]
    return {"entry": lambda: call_entry(native.fn, ptrs, strides),
            "call, out given": lambda: kernel(out=out, **inputs),
            "call": lambda: kernel(**inputs),
            "torch": reference}


def row(name: str, calls: dict, rounds: int, per_turn: int) -> dict:
    """Median microseconds per call of each contender over `rounds` alternated turns of
    `per_turn` calls, and what each adds over the entry alone."""
    times: dict[str, list[float]] = {n: [] for n in calls}
    for fn in calls.values():
        fn()
    for turn in range(rounds):
        order = list(calls)[turn % len(calls):] + list(calls)[:turn % len(calls)]
        for n in order:
            fn = calls[n]
            start = time.perf_counter()
            for _ in range(per_turn):
                fn()
            times[n].append((time.perf_counter() - start) / per_turn * 1e6)
    median = {n: statistics.median(v) for n, v in times.items()}
    return {"row": name, "median_us": median,
            "over_entry_us": {n: median[n] - median["entry"] for n in median if n != "entry"},
            "torch_over_call": median["torch"] / median["call"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000, help="calls per turn")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = [row(name, contenders(op, inputs, ref), args.rounds, args.calls)
            for name, op, inputs, ref in cases()]
    result = {**host_fields(), "rows": rows,
              "command": "python benchmarks/call_overhead.py " + " ".join(sys.argv[1:])}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for r in rows:
        print(f"{r['row']:30s} " + "  ".join(f"{n} {v:.2f}" for n, v in r["median_us"].items())
              + f"  torch/call {r['torch_over_call']:.2f}")


if __name__ == "__main__":
    main()
