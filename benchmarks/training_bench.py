"""Forward + backward of UOL-backed blocks against torch eager and torch.compile, and the
training demo's step time; contenders alternate call by call so load hits them alike.

Ends with the training demo's step and a nanoGPT block's training step (eager, torch.compile
and UOL in lockstep). Writes docs/benchmarks/training.json and the "Training" section of
docs/benchmarks.md.

Page policy: UOL's kernels write large outputs on transparent huge pages (runtime/pages.py);
torch's allocator maps them 4 KiB at a time by default. `--huge-pages-for-all` restarts the run
with torch's own switch, THP_MEM_ALLOC_ENABLE=1 (read once, at its first allocation), so torch's
large tensors get huge pages too, and writes the section "Training, huge pages for every
contender". UOL's runtime hands the buffers of its large outputs out again once they are
free (runtime/output_pool.py), so its repeated calls fault nothing; `--no-output-pool` turns
that off (UOL_OUTPUT_POOL_MB=0), and with `--huge-pages-for-all` gives the ratio of the kernels
alone, every contender faulting in fresh huge pages.
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
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docs_section import write_report

from uol_cli.training_demo import run_demo
from uol_core.graph.zoo import NanoGPTBlock
from uol_core.torch.bridge import to_torch
from uol_core.torch.nn import UolAttention, UolLayerNorm, swap_modules
from uol_core.torch.optim import AdamW as UolAdamW

HUGE_FOR_ALL = "THP_MEM_ALLOC_ENABLE"
NO_POOL = "UOL_OUTPUT_POOL_MB"


def step(fn, inputs, upstream):
    """One forward + backward with a given upstream gradient (made once per case, so that
    filling a fresh tensor, the same cost for every contender, stays out of the timings)."""
    for t in inputs:
        t.grad = None
    out = fn(*inputs)
    out.backward(upstream)


def interleaved(contenders: dict, inputs, seconds: float) -> dict:
    """Median ms per forward+backward of each contender, calls alternated."""
    times: dict[str, list[float]] = {k: [] for k in contenders}
    with torch.no_grad():
        upstream = torch.ones_like(next(iter(contenders.values()))(*inputs))
    for fn in contenders.values():  # warm-up: compiles, caches
        step(fn, inputs, upstream)
        step(fn, inputs, upstream)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for name, fn in contenders.items():
            start = time.perf_counter()
            step(fn, inputs, upstream)
            times[name].append((time.perf_counter() - start) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def cases(quick: bool):
    m = 256 if quick else 1024
    f = to_torch("linear_bias_gelu")
    # The weight at a linear layer's scale (std 1/sqrt(K), as nn.Linear's init): with std 1
    # the pre-activations have std 32 and about 1.4% of gelu's gradients are subnormal, and
    # every GEMM that reads them runs microcode assists (dW took 570-600 ms for torch and us
    # alike, against 13 ms), which is no training run's regime.
    x, w, b = (torch.randn(m, m, requires_grad=True),
               (torch.randn(m, m) / m ** 0.5).requires_grad_(),
               torch.randn(m, requires_grad=True))
    eager = lambda x, w, b: F.gelu(x @ w + b)  # noqa: E731
    yield (f"linear+bias+gelu {m}x{m}x{m}", (x, w, b),
           {"uol": f, "eager": eager, "compile": torch.compile(eager)})
    rows = 1024 if quick else 8192
    ln = UolLayerNorm(1024)
    ref = torch.nn.LayerNorm(1024)
    xs = torch.randn(rows, 1024, requires_grad=True)
    yield (f"layernorm {rows}x1024", (xs,),
           {"uol": ln, "eager": ref, "compile": torch.compile(ref)})
    att = UolAttention(64)
    sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
    compiled = torch.compile(sdpa)
    for s in (128,) if quick else (256, 512):
        q, k, v = (torch.randn(1, 8, s, 64, requires_grad=True) for _ in range(3))
        yield (f"attention B=1 H=8 S={s} D=64", (q, k, v),
               {"uol": att, "eager": sdpa, "compile": compiled})
    causal = UolAttention(64, causal=True)
    sdpa_causal = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    compiled_causal = torch.compile(sdpa_causal)
    for s in (128,) if quick else (256, 512):
        q, k, v = (torch.randn(1, 8, s, 64, requires_grad=True) for _ in range(3))
        yield (f"causal attention B=1 H=8 S={s} D=64", (q, k, v),
               {"uol": causal, "eager": sdpa_causal, "compile": compiled_causal})


def nanogpt_training(steps: int, quick: bool) -> dict:
    """A nanoGPT block trained three ways from the same weights, in lockstep: torch eager,
    torch.compile, and the block with its Linear and LayerNorm layers swapped for UOL's (c_fc
    fused with the tanh GELU its forward calls) and its causal attention for UOL's flash kernels
    (the residual adds stay torch ops).
    AdamW on an MSE target (UOL's for the UOL block, torch's fused one for a fourth
    contender); every step runs each model on the same batch, one after the other,
    so load hits them alike. Returns the losses' gaps and the median step times."""
    torch.manual_seed(0)
    dim, heads, batch, seq = (64, 2, 2, 32) if quick else (256, 4, 8, 128)
    eager = NanoGPTBlock(dim, heads)
    ours = copy.deepcopy(eager)
    swapped = swap_modules(ours)
    ours.attention = UolAttention(dim // heads, causal=True)
    swapped.append("attention (causal)")
    swapped.append("AdamW")
    compiled_block = copy.deepcopy(eager)
    fused_opt_block = copy.deepcopy(eager)
    models = {"eager": eager, "compile": torch.compile(compiled_block), "uol": ours,
              "eager_fused_adamw": fused_opt_block}
    params = {"eager": eager, "compile": compiled_block, "uol": ours,
              "eager_fused_adamw": fused_opt_block}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-3) for k, m in params.items()
            if k in ("eager", "compile")}
    # UOL's AdamW: one generated kernel written over the parameters (uol_core/torch/optim.py);
    # torch's own fused CPU AdamW (`fused=True`, not its default) as the strongest peer of it
    opts["uol"] = UolAdamW(ours.parameters(), lr=1e-3)
    opts["eager_fused_adamw"] = torch.optim.AdamW(fused_opt_block.parameters(), lr=1e-3, fused=True)
    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(batch, seq, dim, generator=gen), torch.randn(batch, seq, dim, generator=gen))
            for _ in range(4)]
    losses: dict[str, list[float]] = {k: [] for k in models}
    times: dict[str, list[float]] = {k: [] for k in models}
    for number in range(steps):
        x, y = data[number % len(data)]
        for name, model in models.items():
            start = time.perf_counter()
            opts[name].zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opts[name].step()
            times[name].append((time.perf_counter() - start) * 1e3)
            losses[name].append(loss.item())
    skip = steps // 5  # the first steps compile and fill caches
    median = {k: statistics.median(v[skip:]) for k, v in times.items()}
    ref = losses["eager"]
    return {"size": f"dim {dim}, {heads} heads, batch {batch} x seq {seq}", "steps": steps,
            "swapped": swapped, "median_step_ms": median, "timed_steps": steps - skip,
            "final_loss": {k: v[-1] for k, v in losses.items()},
            "final_loss_relative_gap": abs(losses["uol"][-1] - ref[-1]) / abs(ref[-1]),
            "max_abs_loss_gap": max(abs(a - b) for a, b in zip(losses["uol"], ref)),
            "x_eager": median["eager"] / median["uol"],
            "x_compile": median["compile"] / median["uol"],
            "x_eager_fused_adamw": median["eager_fused_adamw"] / median["uol"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, short runs")
    parser.add_argument("--seconds", type=float, default=4.0, help="timing window per case")
    parser.add_argument("--steps", type=int, default=150, help="training demo steps")
    parser.add_argument("--gpt-steps", type=int, default=150, help="nanoGPT block training steps")
    parser.add_argument("--huge-pages-for-all", action="store_true",
                        help="give torch's allocations huge pages too (THP_MEM_ALLOC_ENABLE=1)")
    parser.add_argument("--no-output-pool", action="store_true",
                        help="UOL allocates every output afresh (UOL_OUTPUT_POOL_MB=0)")
    parser.add_argument("--only", default="",
                        help="run the cases whose name contains this text and print them "
                             "(no demo, docs left as they are)")
    parser.add_argument("--section", default="",
                        help="docs/benchmarks.md section (default: 'Training', or 'Training, "
                             "huge pages for every contender' with --huge-pages-for-all)")
    args = parser.parse_args()
    wanted = {**({HUGE_FOR_ALL: "1"} if args.huge_pages_for_all else {}),
              **({NO_POOL: "0"} if args.no_output_pool else {})}
    if any(os.environ.get(k) != v for k, v in wanted.items()):
        # torch reads its switch at its first allocation, UOL its pool's at import: run again
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **wanted})
    pages = ("UOL's large outputs allocated afresh on huge pages (" + NO_POOL + "=0)"
             if args.no_output_pool else
             "UOL's large outputs recycled by its output pool, new ones on huge pages") + (
             f"; torch's on huge pages too ({HUGE_FOR_ALL}=1)" if args.huge_pages_for_all else
             "; torch's allocator as it comes")
    report: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "threads": torch.get_num_threads(),
                    "load_average_start": os.getloadavg()[0], "page_policy": pages, "cases": []}
    for name, inputs, contenders in cases(args.quick):
        if args.only not in name:
            continue
        ms = interleaved(contenders, inputs, args.seconds)
        report["cases"].append({"case": name, "ms": ms,
                                "x_eager": ms["eager"] / ms["uol"],
                                "x_compile": ms["compile"] / ms["uol"]})
        print(f"{name}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in ms.items()))
    if args.only:
        return
    demo = run_demo(args.steps)
    layers_only = run_demo(args.steps, optimizer="torch")  # what the layers alone buy
    report["demo_torch_sgd"] = {"speedup_vs_torch_eager": layers_only["speedup_vs_torch_eager"],
                                "final_loss_relative_gap": layers_only["final_loss_relative_gap"]}
    report["demo"] = {k: v for k, v in demo.items() if k not in ("torch", "uol")}
    report["demo"].update(torch_step_ms=demo["torch"]["median_step_ms"],
                          uol_step_ms=demo["uol"]["median_step_ms"],
                          torch_final_loss=demo["torch"]["losses"][-1],
                          uol_final_loss=demo["uol"]["losses"][-1],
                          torch_accuracy=demo["torch"]["accuracy"],
                          uol_accuracy=demo["uol"]["accuracy"])
    gpt = report["nanogpt"] = nanogpt_training(40 if args.quick else args.gpt_steps, args.quick)
    report["load_average_end"] = os.getloadavg()[0]
    d = report["demo"]
    flags = ((" --quick" if args.quick else "")
             + (" --huge-pages-for-all" if args.huge_pages_for_all else "")
             + (" --no-output-pool" if args.no_output_pool else "")
             + (f" --section '{args.section}'" if args.section else ""))
    lines = [f"Command: `python benchmarks/training_bench.py{flags}` "
             f"({report['date']}, {report['threads']} threads, load average "
             f"{report['load_average_start']:.1f} at the start, {report['load_average_end']:.1f} "
             f"at the end). Pages: {pages}.", "",
             "Forward + backward, median ms per call, contenders alternated:", "",
             "| case | UOL ms | eager ms | torch.compile ms | x eager | x compile |",
             "|---|---|---|---|---|---|"]
    for c in report["cases"]:
        ms = c["ms"]
        lines.append(f"| {c['case']} | {ms['uol']:.2f} | {ms['eager']:.2f} | {ms['compile']:.2f} "
                     f"| {c['x_eager']:.2f} | {c['x_compile']:.2f} |")
    lines += ["", f"Training demo (`uol train-demo --steps {args.steps}`): final loss torch "
                  f"{d['torch_final_loss']:.5f}, UOL {d['uol_final_loss']:.5f} (relative gap "
                  f"{d['final_loss_relative_gap']:.1e}); accuracy {d['torch_accuracy']:.4f} vs "
                  f"{d['uol_accuracy']:.4f}; median step {d['torch_step_ms']:.2f} ms (torch) vs "
                  f"{d['uol_step_ms']:.2f} ms (UOL, its SGD too): "
                  f"{d['speedup_vs_torch_eager']:.2f}x. With torch's SGD on the UOL model "
                  f"(`--optimizer torch`, the layers alone): "
                  f"{report['demo_torch_sgd']['speedup_vs_torch_eager']:.2f}x.", "",
              f"nanoGPT block training step ({gpt['size']}; AdamW, MSE; {gpt['steps']} steps in "
              f"lockstep, the median of the last {gpt['timed_steps']}; UOL: "
              f"{', '.join(gpt['swapped'])}): median step {gpt['median_step_ms']['eager']:.2f} ms "
              f"(eager), {gpt['median_step_ms']['compile']:.2f} ms (torch.compile), "
              f"{gpt['median_step_ms']['uol']:.2f} ms (UOL): {gpt['x_eager']:.2f}x eager, "
              f"{gpt['x_compile']:.2f}x compile; eager with torch's fused AdamW "
              f"(`fused=True`) {gpt['median_step_ms']['eager_fused_adamw']:.2f} ms: "
              f"{gpt['x_eager_fused_adamw']:.2f}x; final loss {gpt['final_loss']['eager']:.5f} "
              f"(eager), {gpt['final_loss']['uol']:.5f} (UOL), relative gap "
              f"{gpt['final_loss_relative_gap']:.1e}."]
    if args.section:
        write_report(args.section, report, lines)
    elif args.no_output_pool:
        write_report("Training, no output pool" + (", huge pages for every contender"
                                                    if args.huge_pages_for_all else ""),
                     report, lines)
    elif args.huge_pages_for_all:
        write_report("Training, huge pages for every contender", report, lines,
                     slug="training_huge_pages")
    else:
        write_report("Training", report, lines, slug="training")


if __name__ == "__main__":
    main()
