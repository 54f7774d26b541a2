"""One optimizer step, UOL's against torch's three CPU implementations, contenders alternated.

For the training demo's MLP (SGD with momentum) and a nanoGPT block (AdamW): torch's default
(one tensor at a time), `foreach=True`, `fused=True`, and UOL's (`uol_core.torch.optim`, one
generated kernel written over every parameter of the group). Every contender owns a copy of
the parameters, the same gradients and its own state; each round steps each contender once,
in turn, so load from other processes hits them alike. Reports the median step per contender
and torch's over UOL's. Writes docs/benchmarks/<section>.json and its docs/benchmarks.md
section.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from docs_section import write_report

from uol_cli.training_demo import make_model
from uol_core.graph.zoo import NanoGPTBlock
from uol_core.torch import optim as uol_optim

TORCH_KINDS = {"torch (default)": {}, "torch foreach": {"foreach": True},
               "torch fused": {"fused": True}}


def contenders(model: torch.nn.Module, torch_cls, uol_cls, settings: dict) -> dict:
    """name -> optimizer over its own copy of `model`, every parameter given the same gradient."""
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(p.shape, generator=gen) for p in model.parameters()]
    out = {}
    for name, extra in [*TORCH_KINDS.items(), ("UOL", None)]:
        copy_ = copy.deepcopy(model)
        for p, g in zip(copy_.parameters(), grads):
            p.grad = g.clone()
        out[name] = uol_cls(copy_.parameters(), **settings) if extra is None else \
            torch_cls(copy_.parameters(), **settings, **extra)
    return out


def alternate(opts: dict, rounds: int) -> dict[str, float]:
    """Median ms per step of each optimizer, stepped in turn for `rounds` rounds."""
    for opt in opts.values():  # warm: state, plans, kernels
        for _ in range(3):
            opt.step()
    samples: dict[str, list[float]] = {name: [] for name in opts}
    for _ in range(rounds):
        for name, opt in opts.items():
            start = time.perf_counter()
            opt.step()
            samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(v) for name, v in samples.items()}


def cases(quick: bool):
    torch.manual_seed(0)
    yield ("training demo MLP, SGD momentum 0.9", make_model(0), torch.optim.SGD, uol_optim.SGD,
           {"lr": 0.05, "momentum": 0.9})
    dim = 64 if quick else 256
    yield (f"nanoGPT block dim {dim}, AdamW", NanoGPTBlock(dim, 4), torch.optim.AdamW,
           uol_optim.AdamW, {"lr": 1e-3, "weight_decay": 0.01})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=300, help="steps per contender")
    parser.add_argument("--quick", action="store_true", help="small sizes, few rounds")
    parser.add_argument("--section", default="Optimizer step",
                        help="docs/benchmarks.md section to write")
    args = parser.parse_args()
    rounds = 30 if args.quick else args.rounds
    report: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "threads": torch.get_num_threads(),
                    "load_average_start": os.getloadavg()[0], "rounds": rounds, "cases": []}
    lines = []
    for name, model, torch_cls, uol_cls, settings in cases(args.quick):
        ms = alternate(contenders(model, torch_cls, uol_cls, settings), rounds)
        params = sum(p.numel() for p in model.parameters())
        report["cases"].append({"case": name, "parameters": params, "ms": ms,
                                "x": {k: v / ms["UOL"] for k, v in ms.items() if k != "UOL"}})
        print(f"{name}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in ms.items()))
    report["load_average_end"] = os.getloadavg()[0]
    flags = (" --quick" if args.quick else "") + (f" --rounds {args.rounds}" if args.rounds != 300
                                                   else "") + f" --section '{args.section}'"
    lines += [f"Command: `python benchmarks/optim_bench.py{flags}` ({report['date']}, "
              f"{report['threads']} threads, load average {report['load_average_start']:.1f} at "
              f"the start, {report['load_average_end']:.1f} at the end). Median ms per step, "
              f"{rounds} steps each, contenders alternated; x: that contender's time over UOL's.",
              "", "| case | parameters | " + " | ".join(f"{k} ms" for k in [*TORCH_KINDS, "UOL"])
              + " | " + " | ".join(f"x {k}" for k in TORCH_KINDS) + " |",
              "|---" * (2 + 2 * len(TORCH_KINDS) + 1) + "|"]
    for c in report["cases"]:
        ms = c["ms"]
        lines.append(f"| {c['case']} | {c['parameters']} | "
                     + " | ".join(f"{ms[k]:.3f}" for k in [*TORCH_KINDS, "UOL"]) + " | "
                     + " | ".join(f"{c['x'][k]:.2f}" for k in TORCH_KINDS) + " |")
    if not args.quick:
        write_report(args.section, report, lines)


if __name__ == "__main__":
    main()
