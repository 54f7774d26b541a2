"""Training through the Triton backend on a GPU: forward and every gradient of linear + gelu,
layernorm, softmax and attention against torch autograd at realistic sizes, then the demo MLP's
training step (UOL Triton kernels vs torch eager, same weights and batches).

    python benchmarks/gpu_train.py [--out docs/benchmarks/gpu_train.json]

Without a GPU it runs the same checks at tiny sizes under the Triton interpreter.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from uol_cli.training_demo import digits_data, make_model
from uol_core.torch.bridge import to_torch
from uol_core.torch.nn import swap_modules

OUT = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "gpu_train.json"


def check(name: str, args: list[torch.Tensor], reference) -> dict:
    """Relative max errors of the output and of each gradient, and where the backward ran."""
    fn = to_torch(name, backend="triton")
    ours = [a.clone().requires_grad_() for a in args]
    theirs = [a.clone().requires_grad_() for a in args]
    got, want = fn(*ours), reference(*theirs)
    upstream = torch.randn_like(want)
    got.backward(upstream)
    want.backward(upstream)
    errors = [float((got - want).abs().max())]
    errors += [float((a.grad - b.grad).abs().max() / (b.grad.abs().max() + 1e-6))
               for a, b in zip(ours, theirs)]
    return {"max_errors": errors, "ok": all(e < 2e-3 for e in errors),
            "backward_ran_on": sorted(set(fn.runners(tuple(ours))[1].used.values()))}


def step_times(dev: str, steps: int = 60) -> dict:
    """Median step (ms) and final loss of the demo MLP, torch vs UOL Triton, in lockstep."""
    xtr, ytr, _, _ = digits_data()
    x, y = xtr[:128].to(dev), ytr[:128].to(dev)
    models = {"torch": make_model().to(dev), "uol_triton": make_model().to(dev)}
    swap_modules(models["uol_triton"], backend="triton")
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for k, m in models.items()}
    times: dict[str, list[float]] = {k: [] for k in models}
    losses: dict[str, float] = {}
    for _ in range(steps):
        for name, model in models.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            opts[name].zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opts[name].step()
            torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
            losses[name] = float(loss)
    return {"step_ms": {k: statistics.median(v[10:]) * 1e3 for k, v in times.items()},
            "final_loss": losses}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    tiny = dev == "cpu"
    torch.manual_seed(0)
    m, k, n = (16, 24, 32) if tiny else (1024, 1024, 1024)
    r, c = (8, 40) if tiny else (8192, 1024)
    s, d = (16, 8) if tiny else (1024, 64)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=dev)

    result = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu (interpreter)"}
    result["linear_bias_gelu"] = check(
        "linear_bias_gelu", [randn(m, k), randn(k, n) / k**0.5, randn(n)],
        lambda x, w, b: F.gelu(x @ w + b))
    result["layernorm"] = check(
        "layernorm", [randn(r, c), torch.rand(c, device=dev) + 0.5, randn(c)],
        lambda x, g, b: F.layer_norm(x, (c,), g, b, 1e-5))
    result["softmax"] = check("softmax", [randn(r, c)], lambda x: torch.softmax(x, -1))
    result["attention"] = check(
        "attention", [randn(s, d), randn(s, d), randn(s, d)],
        lambda q, kk, v: torch.softmax((q @ kk.T) * 0.125, -1) @ v)  # the op's scale
    if dev == "cuda":
        result["mlp"] = step_times(dev)
    print(json.dumps(result, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
