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


def run_case(op, cfg, inputs, sizes, baseline, flops, nbytes, bw, tol):
    source = emit(op, cfg)
    module = load_module(source)
    ours = lambda: module.launch(*inputs, **sizes)  # noqa: E731
    got = next(iter(ours().values())).float()
    want = baseline().float()
    err = float((got - want).abs().max() / (want.abs().max() + 1e-6))
    t_ours, t_ref = bench(ours), bench(baseline)
    row = {"ok": err <= tol, "rel_err": err, "ms": t_ours, "baseline_ms": t_ref,
           "ratio_vs_baseline": t_ref / t_ours, "kernels": source.meta["pattern"]}
    if flops:
        row["tflops"] = flops / t_ours / 1e9
    if nbytes:
        row["gbps"] = nbytes / t_ours / 1e6
        row["pct_hbm"] = 100 * row["gbps"] / bw if bw else None
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="h200-sxm")
    ap.add_argument("--out", default="docs/benchmarks/gpu_check.json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_check needs a CUDA GPU; none is visible (figures stay pending)")
    from uol_core.hfl.loader import load_target

    bw = load_target(args.target).mem_bandwidth_gbps
    dev = "cuda"
    results = {"device": torch.cuda.get_device_name(), "target": args.target,
               "host": platform.node(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "cases": {}}
    for t, dt in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        op = parse(GEMM.format(t=t), "gemm.odl")
        for n in (4096, 8192):
            a, b = torch.randn(n, n, device=dev, dtype=dt), torch.randn(n, n, device=dev, dtype=dt)
            results["cases"][f"gemm_{t}_{n}"] = run_case(
                op, GEMM_CONFIG, [a, b], {"M": n, "N": n, "K": n}, lambda a=a, b=b: a @ b,
                2 * n**3, 0, bw, 2e-2)
    r, c = 8192, 8192
    x = torch.randn(r, c, device=dev)
    results["cases"]["softmax_8192"] = run_case(
        load_op("softmax"), {"num_warps": 16}, [x], {"R": r, "C": c},
        lambda: torch.softmax(x, -1), 0, 2 * x.numel() * 4, bw, 1e-4)
    g, bt = torch.randn(c, device=dev), torch.randn(c, device=dev)
    results["cases"]["layernorm_8192"] = run_case(
        load_op("layernorm"), {"num_warps": 16}, [x, g, bt], {"R": r, "C": c},
        lambda: torch.nn.functional.layer_norm(x, (c,), g, bt, 1e-5), 0, 2 * x.numel() * 4, bw,
        1e-3)
    # Attention: emit recognises the five ODL statements and returns one flash kernel (online
    # softmax over BLOCK_N key blocks, no score matrix in memory); causal skips masked blocks.
    s, d = 4096, 64
    flash = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
    q, k, v = (torch.randn(s, d, device=dev) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    results["cases"]["attention_4096x64"] = run_case(
        load_op("attention"), flash, [q, k, v], {"S": s, "D": d, "T": s, "E": d},
        lambda: sdpa(q[None], k[None], v[None], scale=0.125)[0], 4 * s * s * d, 0, bw, 1e-3)
    results["cases"]["causal_attention_4096x64"] = run_case(
        load_op("causal_attention"), flash, [q, k, v], {"S": s, "D": d},
        lambda: sdpa(q[None], k[None], v[None], scale=0.125, is_causal=True)[0],
        2 * s * s * d, 0, bw, 1e-3)
    b, h = 4, 16
    qb, kb, vb = (torch.randn(b, h, 1024, d, device=dev) for _ in range(3))
    results["cases"]["attention_batched_4x16x1024x64"] = run_case(
        load_op("attention_batched"), flash, [qb, kb, vb],
        {"B": b, "NH": h, "S": 1024, "T": 1024, "D": d},
        lambda: sdpa(qb, kb, vb, scale=0.125), 4 * b * h * 1024 * 1024 * d, 0, bw, 1e-3)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
