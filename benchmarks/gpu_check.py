"""GPU check of emitted Triton: every case verified against torch first, then timed with do_bench."""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from uol_core.backends.triton import emit
from uol_core.odl import parse
from uol_core.ops import load_op
from uol_core.runtime.triton_runner import load_module

GEMM = "op gemm(A: {t}[M, K], B: {t}[K, N]) -> C: {t}[M, N]:\n    C[m, n] = sum[k](A[m, k] * B[k, n])\n"
GEMM_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8,
               "num_stages": 3}


def bench(fn) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def candidates(op, sizes: dict, target, top: int) -> list[dict]:
    """The ACG's ranked configs (constraint-solved space, roofline order), one per block shape."""
    from uol_core.backends.triton.space import gpu_space, rank

    picked: dict[tuple, dict] = {}
    for cfg, _ in rank(gpu_space(op, sizes, target), target):
        picked.setdefault((cfg["BLOCK_M"], cfg["BLOCK_N"]), cfg)
    return list(picked.values())[:top]


def run_case(op, cfgs, inputs, sizes, baseline, flops, nbytes, bw, tol):
    """Verify and time each config (the model's order); report the best and the model's pick."""
    want = baseline().float()
    timed = []
    for cfg in cfgs:
        source = emit(op, cfg)
        module = load_module(source)
        ours = lambda m=module: m.launch(*inputs, **sizes)  # noqa: E731
        got = next(iter(ours().values())).float()
        err = float((got - want).abs().max() / (want.abs().max() + 1e-6))
        timed.append((bench(ours), err, cfg, source))
    t_ref = bench(baseline)
    t_ours, err, cfg, source = min(timed, key=lambda x: x[0])
    row = {"ok": all(e <= tol for _, e, _, _ in timed), "rel_err": err, "ms": t_ours,
           "baseline_ms": t_ref, "ratio_vs_baseline": t_ref / t_ours,
           "kernels": source.meta["pattern"], "config": cfg, "configs_measured": len(timed),
           "model_pick_ms": timed[0][0], "model_pick_config": timed[0][2]}
    if flops:
        row["tflops"] = flops / t_ours / 1e9
    if nbytes:
        row["gbps"] = nbytes / t_ours / 1e6
        row["pct_hbm"] = 100 * row["gbps"] / bw if bw else None
    return row


GOALS = {"gemm": ("90% of cuBLAS", 0.90), "softmax": ("85% of HBM", None),
         "layernorm": ("85% of HBM", None), "attention": ("70% of SDPA", 0.70),
         "causal": ("70% of SDPA", 0.70)}


def _num(x: float | None) -> str:
    return f"{x:.0f}" if x else "-"


def render(results: dict) -> list[str]:
    """The docs/benchmarks.md section for one gpu_check run."""
    lines = [f"Command: `benchmarks/gpu_check.sh` ({results['started']}, {results['device']}, "
             f"HFL target `{results['target']}`). Every case is verified against torch first; "
             "the config is the best of the ACG's ranked candidates measured with "
             "`triton.testing.do_bench` (median); 'model pick' is the untuned top-1.", "",
             "| case | ours ms | torch ms | ours/torch | TFLOP/s | % HBM | model pick ms | "
             "config | goal |", "|---|---|---|---|---|---|---|---|---|"]
    for name, row in results["cases"].items():
        goal, ratio = GOALS[name.split("_")[0]]
        met = (row["pct_hbm"] >= 85 if ratio is None else row["ratio_vs_baseline"] >= ratio)
        cfg = ", ".join(f"{k}={v}" for k, v in row.get("config", {}).items())
        lines.append(
            f"| {name} | {row['ms']:.3f} | {row['baseline_ms']:.3f} | "
            f"{row['ratio_vs_baseline']:.2f} | {_num(row.get('tflops'))} | "
            f"{_num(row.get('pct_hbm'))} | {row.get('model_pick_ms', row['ms']):.3f} | {cfg} | "
            f"{goal}: {'met' if met and row['ok'] else 'not met'} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="h200-sxm")
    ap.add_argument("--out", default="docs/benchmarks/gpu_check.json")
    ap.add_argument("--render", metavar="JSON", help="only rewrite the docs section from a run")
    args = ap.parse_args()
    if args.render:
        from docs_section import replace_section

        lines = render(json.loads(Path(args.render).read_text()))
        replace_section("\n".join(["## GPU (Triton)", "", *lines, ""]))
        return
    if not torch.cuda.is_available():
        raise SystemExit("gpu_check needs a CUDA GPU; none is visible (figures stay pending)")
    from uol_core.hfl.loader import load_target

    target = load_target(args.target)
    bw = target.mem_bandwidth_gbps
    dev = "cuda"
    results = {"device": torch.cuda.get_device_name(), "target": args.target,
               "host": platform.node(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "cases": {}}
    for t, dt in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        op = parse(GEMM.format(t=t), "gemm.odl")
        for n in (4096, 8192):
            a, b = torch.randn(n, n, device=dev, dtype=dt), torch.randn(n, n, device=dev, dtype=dt)
            sizes = {"M": n, "N": n, "K": n}
            results["cases"][f"gemm_{t}_{n}"] = run_case(
                op, [*candidates(op, sizes, target, 5), GEMM_CONFIG], [a, b], sizes, lambda a=a, b=b: a @ b,
                2 * n**3, 0, bw, 2e-2)
    r, c = 8192, 8192
    x = torch.randn(r, c, device=dev)
    results["cases"]["softmax_8192"] = run_case(
        load_op("softmax"), [{"num_warps": 16}], [x], {"R": r, "C": c},
        lambda: torch.softmax(x, -1), 0, 2 * x.numel() * 4, bw, 1e-4)
    g, bt = torch.randn(c, device=dev), torch.randn(c, device=dev)
    results["cases"]["layernorm_8192"] = run_case(
        load_op("layernorm"), [{"num_warps": 16}], [x, g, bt], {"R": r, "C": c},
        lambda: torch.nn.functional.layer_norm(x, (c,), g, bt, 1e-5), 0, 2 * x.numel() * 4, bw,
        1e-3)
    # Attention: emit recognises the five ODL statements and returns one flash kernel (online
    # softmax over BLOCK_N key blocks, no score matrix in memory); causal skips masked blocks.
    s, d = 4096, 64

    def flash(name: str, sizes: dict) -> list[dict]:
        return candidates(load_op(name), sizes, target, 8)

    q, k, v = (torch.randn(s, d, device=dev) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    results["cases"]["attention_4096x64"] = run_case(
        load_op("attention"), flash("attention", {"S": s, "D": d, "T": s, "E": d}), [q, k, v],
        {"S": s, "D": d, "T": s, "E": d},
        lambda: sdpa(q[None], k[None], v[None], scale=0.125)[0], 4 * s * s * d, 0, bw, 1e-3)
    results["cases"]["causal_attention_4096x64"] = run_case(
        load_op("causal_attention"), flash("causal_attention", {"S": s, "D": d}), [q, k, v],
        {"S": s, "D": d},
        lambda: sdpa(q[None], k[None], v[None], scale=0.125, is_causal=True)[0],
        2 * s * s * d, 0, bw, 1e-3)
    b, h = 4, 16
    qb, kb, vb = (torch.randn(b, h, 1024, d, device=dev) for _ in range(3))
    results["cases"]["attention_batched_4x16x1024x64"] = run_case(
        load_op("attention_batched"),
        flash("attention_batched", {"B": b, "NH": h, "S": 1024, "T": 1024, "D": d}), [qb, kb, vb],
        {"B": b, "NH": h, "S": 1024, "T": 1024, "D": d},
        lambda: sdpa(qb, kb, vb, scale=0.125), 4 * b * h * 1024 * 1024 * d, 0, bw, 1e-3)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
