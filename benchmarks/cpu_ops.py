"""CPU operator benchmark: UOL's non-GEMM C kernels vs torch eager and torch.compile, one run.

Run: `.venv/bin/python benchmarks/cpu_ops.py [--quick] [--no-compile] [--section NAME]`.
Writes docs/benchmarks/cpu_ops.json and the "CPU operators" section of docs/benchmarks.md.

Memory policy: every contender allocates its outputs on every call, all on transparent huge
pages (UOL's large outputs ask for them, runtime/pages.py; torch's through its own switch,
THP_MEM_ALLOC_ENABLE=1, so the run restarts itself with it): on a large fresh output the
first-touch page faults cost as much as a memory-bound kernel, and both sides pay them alike.
UOL's kernel writing into outputs it already touched is timed too ("in place"): the kernel
alone, against a torch copy between touched tensors (the bandwidth this run got). A kernel that
can stream its output with non-temporal stores (config stream=1) is timed that way as well,
fresh and in place: acg/stores.py chose ordinary stores for fresh outputs from these figures.
GB/s counts each input and output once.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from docs_section import replace_section  # noqa: E402

from uol_core.backends.c.native import compile_c  # noqa: E402
from uol_core.backends.c.space import choose_pattern_config  # noqa: E402
from uol_core.hfl import load_target  # noqa: E402
from uol_core.ops import load_op  # noqa: E402
from uol_core.runtime.build import compiler_version  # noqa: E402
from uol_core.runtime.inputs import random_inputs  # noqa: E402
from uol_core.runtime.measure import time_call  # noqa: E402
from uol_core.runtime.pages import new_output  # noqa: E402
from uol_core.runtime.reference import evaluate_all  # noqa: E402
from uol_core.runtime.verify import compare  # noqa: E402


def _rms(X, gamma):
    return X * torch.rsqrt((X * X).mean(-1, keepdim=True) + 1e-6) * gamma


def _chain(X, b, G):
    return torch.relu(torch.tanh(X * 1.5 + b) * G - 0.1)


# (label, library op, sizes, quick sizes, torch function over the op's inputs by name)
CASES = [
    ("softmax 4096x4096", "softmax", {"R": 4096, "C": 4096}, {"R": 512, "C": 512},
     lambda X: torch.softmax(X, -1)),
    ("layernorm 8192x1024", "layernorm", {"R": 8192, "C": 1024}, {"R": 512, "C": 256},
     lambda X, gamma, beta: F.layer_norm(X, (X.shape[-1],), gamma, beta)),
    ("rmsnorm 8192x1024", "rmsnorm", {"R": 8192, "C": 1024}, {"R": 512, "C": 256}, _rms),
    ("elementwise chain of 6, 4096x4096", "elementwise_chain6", {"M": 4096, "N": 4096},
     {"M": 512, "N": 512}, _chain),
    ("attention B=1 H=8 S=1024 D=64 (vs SDPA)", "attention_batched",
     {"B": 1, "NH": 8, "S": 1024, "T": 1024, "D": 64},
     {"B": 1, "NH": 2, "S": 128, "T": 128, "D": 64},
     lambda Q, K, V: F.scaled_dot_product_attention(Q, K, V, scale=0.125)),
    ("conv2d 3x3 pad 1, N=8 64->64 56x56", "conv2d_pad1",
     {"N": 8, "C": 64, "H": 56, "W": 56, "K": 64}, {"N": 1, "C": 16, "H": 14, "W": 14, "K": 16},
     lambda X, F_: F.conv2d(X, F_, padding=1)),
    ("conv2d 3x3 pad 1, N=8 64->64 28x28 (resnet_basic)", "conv2d_pad1",
     {"N": 8, "C": 64, "H": 28, "W": 28, "K": 64}, {"N": 1, "C": 16, "H": 14, "W": 14, "K": 16},
     lambda X, F_: F.conv2d(X, F_, padding=1)),
    ("conv2d 3x3 pad 1, N=8 512->512 7x7 (resnet's last stage)", "conv2d_pad1",
     {"N": 8, "C": 512, "H": 7, "W": 7, "K": 512}, {"N": 2, "C": 16, "H": 7, "W": 7, "K": 16},
     lambda X, F_: F.conv2d(X, F_, padding=1)),
    ("depthwise conv2d 7x7, N=8 C=96 28x28 out (convnext)", "depthwise_conv2d",
     {"N": 8, "C": 96, "H": 34, "W": 34, "R": 7, "S": 7}, {"N": 1, "C": 16, "H": 20, "W": 20, "R": 7, "S": 7},
     lambda X, F_: F.conv2d(X, F_.unsqueeze(1), groups=X.shape[1])),
]


HUGE_FOR_ALL = "THP_MEM_ALLOC_ENABLE"
# What runs before the one-policy rule measured (their reports carry no policy of their own).
OLD_POLICY = ("UOL wrote into outputs it had touched before while torch allocated its own, on "
              "4 KiB pages: these ratios overstate UOL by torch's page faults")


def seconds(fn) -> float:
    """Median seconds per call."""
    return time_call(fn, warmup=2, repeats=9, min_seconds=0.3).median_s


def interleaved_ms(fns: dict, rounds: int = 15, min_seconds: float = 1.0) -> dict:
    """Median ms per call of each contender, calls alternated round by round (so that load from
    other processes hits every contender alike), after two warm-up calls each."""
    for fn in fns.values():
        fn()
        fn()
    times: dict = {name: [] for name in fns}
    start = time.perf_counter()
    while len(times[next(iter(fns))]) < rounds or time.perf_counter() - start < min_seconds:
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) * 1e3 for name, v in times.items()}


def copy_gbps(threads: int) -> float:
    """Bandwidth of a plain 256 MiB torch copy (read + write), this run."""
    src = torch.randn(1 << 26)
    dst = torch.empty_like(src)
    t = seconds(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / t / 1e9


def _fresh(kernel):
    """A call of `kernel` that allocates new outputs, as torch does (never a buffer the output
    pool recycles: that would be the in-place policy)."""
    shapes = {n: (t.shape, t.dtype) for n, t in kernel.outputs_like().items()}
    return lambda ins: kernel.run(ins, {n: new_output(s, d) for n, (s, d) in shapes.items()})


def run_case(label, name, sizes, torch_fn, target, use_compile: bool) -> dict:
    op = load_op(name)
    ins = random_inputs(op, sizes, seed=0)
    cfg, _ = choose_pattern_config(op, sizes, target)
    kernel = compile_c(op, sizes, target, cfg)
    out = kernel.outputs_like()
    kernel.run(ins, out)
    args = [ins[d.name] for d in op.inputs]
    small = {k: v for k, v in ins.items()}
    ok = compare(out, {d.name: torch_fn(*args).reshape(out[d.name].shape) for d in op.outputs},
                 kernel.src.meta["reduction_length"]).ok if name != "conv2d_pad1" else \
        compare(out, evaluate_all(op, small), kernel.src.meta["reduction_length"]).ok
    nbytes = sum(t.numel() * t.element_size() for t in list(ins.values()) + list(out.values()))
    uol = _fresh(kernel)
    fns = {"uol": lambda: uol(ins), "eager": lambda: torch_fn(*args),
           "in_place": lambda: kernel.run(ins, out)}
    row = {"case": label, "op": name, "sizes": sizes, "config": cfg, "verified": ok,
           "bytes": nbytes, "fusion": kernel.src.meta.get("fusion", ""),
           "generator": kernel.src.meta.get("generator", "")}
    streamed = compile_c(op, sizes, target, {**cfg, "stream": 1})
    if "non-temporal stores" in streamed.src.text.split("*/", 1)[0]:
        streamed_out, streamed_fresh = streamed.outputs_like(), _fresh(streamed)
        fns["streamed"] = lambda: streamed_fresh(ins)
        fns["streamed_in_place"] = lambda: streamed.run(ins, streamed_out)
    if use_compile:
        try:
            compiled = torch.compile(torch_fn)
            compiled(*args)
            fns["compile"] = lambda: compiled(*args)
        except Exception as exc:  # torch.compile needs a working C++ toolchain; say why not
            row["compile_error"] = str(exc).splitlines()[0][:200]
    row.update({f"{k}_ms": v for k, v in interleaved_ms(fns).items()})
    for key in ("uol", "eager", "compile", "in_place"):
        if f"{key}_ms" in row:
            row[f"{key}_gbps"] = nbytes / (row[f"{key}_ms"] / 1e3) / 1e9
    best_torch = min(row["eager_ms"], row.get("compile_ms", float("inf")))
    row["speedup_vs_best_torch"] = best_torch / row["uol_ms"]
    row["speedup_vs_eager"] = row["eager_ms"] / row["uol_ms"]
    if "compile_ms" in row:
        row["speedup_vs_compile"] = row["compile_ms"] / row["uol_ms"]
    if "streamed_ms" in row:  # > 1: streaming pays
        row["streamed_speedup"] = row["uol_ms"] / row["streamed_ms"]
        row["streamed_in_place_speedup"] = row["in_place_ms"] / row["streamed_in_place_ms"]
    return row


def _flops(name: str, sizes: dict) -> float:
    """Floating-point operations of the compute-bound cases (0 for the memory-bound ones)."""
    if name == "attention_batched":
        return 4.0 * sizes["B"] * sizes["NH"] * sizes["S"] * sizes["T"] * sizes["D"]
    if name == "conv2d_pad1":
        return 2.0 * sizes["N"] * sizes["K"] * sizes["H"] * sizes["W"] * sizes["C"] * 9
    if name == "depthwise_conv2d":
        out = (sizes["H"] - sizes["R"] + 1) * (sizes["W"] - sizes["S"] + 1)
        return 2.0 * sizes["N"] * sizes["C"] * out * sizes["R"] * sizes["S"]
    return 0.0


def write_markdown(report: dict) -> None:
    """Replace (or append) the report's section of docs/benchmarks.md."""
    lines = [f"## {report.get('section', 'CPU operators')}", "",
             f"Command: `{report['command']}` ({report['date']}, {report['machine']}, "
             f"{report['threads']} threads, {report['compiler']}, torch {report['torch']}).",
             *([f"Host ISA (HFL host target): {' '.join(report['isa'])}."] if report.get("isa") else []),
             f"Memory policy: {report.get('policy', OLD_POLICY)}.",
             f"Bandwidth references: STREAM (HFL host target) {report['stream_gbps']:.1f} GB/s, "
             f"torch copy between touched tensors in this run {report['copy_gbps']:.1f} GB/s. "
             "The VM shares its host: compare the ratios, measured in one run.", "",
             "| case | UOL ms | eager ms | compile ms | x best torch | x eager | UOL in place ms "
             "| in place GB/s | % of copy | streamed: x fresh / x in place | verified |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["cases"]:
        comp = f"{r['compile_ms']:.2f}" if "compile_ms" in r else "-"
        place = r.get("in_place_gbps", r["uol_gbps"])
        stores = (f"{r['streamed_speedup']:.2f} / {r['streamed_in_place_speedup']:.2f}"
                  if "streamed_speedup" in r else "-")
        lines.append(f"| {r['case']} | {r['uol_ms']:.2f} | {r['eager_ms']:.2f} | {comp} | "
                     f"{r['speedup_vs_best_torch']:.2f} | {r['speedup_vs_eager']:.2f} | "
                     f"{r.get('in_place_ms', r['uol_ms']):.2f} | {place:.1f} | "
                     f"{100 * place / report['copy_gbps']:.0f}% | {stores} "
                     f"| {'yes' if r['verified'] else 'NO'} |")
    for r in report["cases"]:
        flops = _flops(r["op"], r["sizes"])
        if flops:
            lines.append(f"- {r['case']}: UOL {flops / r['uol_ms'] / 1e6:.1f} GFLOP/s, torch "
                         f"{flops / r['eager_ms'] / 1e6:.1f} GFLOP/s (compute bound: GB/s says little).")
    lines += ["", "Kernels (each one's own summary of what it fused):"]
    lines += [f"- {r['case']}: {r.get('generator', '?')}: {r['fusion'].splitlines()[0]}"
              for r in report["cases"] if r.get("fusion")]
    lines += ["", "Contenders alternate call by call; ratios use the median of each. \"streamed\": "
              "the same kernel with non-temporal stores (config stream=1) against the default "
              "one, with fresh outputs and written in place (> 1: streaming is faster).",
              "Rerun: `.venv/bin/python benchmarks/cpu_ops.py` (`--quick` small sizes, "
              "`--no-compile` without torch.compile, `--only softmax,rmsnorm`, `--section NAME`).", ""]
    replace_section("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--only", default="", help="comma-separated op names to run")
    parser.add_argument("--markdown-only", action="store_true",
                        help="rewrite the docs section from docs/benchmarks/cpu_ops.json")
    parser.add_argument("--section", default="CPU operators",
                        help="the docs/benchmarks.md section to write (one per kind of host)")
    args = parser.parse_args()
    if os.environ.get(HUGE_FOR_ALL) != "1":  # torch reads it once, at its first allocation
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, HUGE_FOR_ALL: "1"})
    if args.markdown_only:
        write_markdown(json.loads((ROOT / "docs" / "benchmarks" / "cpu_ops.json").read_text()))
        return
    target = load_target("host")
    threads = int(target.cores or 1)
    torch.set_num_threads(threads)
    report = {"command": shlex.join(["python", "benchmarks/cpu_ops.py", *sys.argv[1:]]),
              "date": time.strftime("%Y-%m-%d %H:%M"),
              "machine": platform.processor() or platform.machine(), "threads": threads,
              "compiler": compiler_version(), "torch": torch.__version__,
              "section": args.section, "isa": list(target.isa or []),
              "policy": "every contender allocates its outputs on every call, on huge pages "
                        f"({HUGE_FOR_ALL}=1 for torch)",
              "stream_gbps": float(target.mem_bandwidth_gbps or 0), "copy_gbps": copy_gbps(threads),
              "cases": []}
    for label, name, sizes, quick, fn in CASES:
        if args.only and name not in args.only.split(","):
            continue
        row = run_case(label, name, quick if args.quick else sizes, fn, target, not args.no_compile)
        row["fraction_of_copy"] = row["uol_gbps"] / report["copy_gbps"]
        row["fraction_of_stream"] = row["uol_gbps"] / max(report["stream_gbps"], 1e-9)
        print(f"{label}: UOL {row['uol_ms']:.2f} ms ({row['uol_gbps']:.1f} GB/s), "
              f"x{row['speedup_vs_best_torch']:.2f} best torch, verified={row['verified']}",
              flush=True)
        report["cases"].append(row)
    host = args.section.removeprefix("CPU operators").strip(" ,")  # "AMD Zen 5 host" -> a suffix
    slug = "_".join(["cpu_ops", *re.findall(r"\w+", host.lower())])
    out = ROOT / "docs" / "benchmarks" / f"{slug}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    write_markdown(report)


if __name__ == "__main__":
    main()
