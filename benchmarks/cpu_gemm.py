"""CPU GEMM benchmark: UOL's C kernels vs torch.matmul (MKL), numpy (OpenBLAS) and torch.compile.

Run: `make bench` or `.venv/bin/python benchmarks/cpu_gemm.py [--quick]`.
Writes docs/benchmarks/cpu_gemm.json and the "CPU GEMM" section of docs/benchmarks.md.
Everything is measured in one run, on the same number of threads (the target's cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cpu_gemm_bf16 import bf16_lines, bf16_rows, probe_peaks  # noqa: E402
from docs_section import replace_section  # noqa: E402

from uol_core.acg.session import open_session  # noqa: E402
from uol_core.api import compile as uol_compile  # noqa: E402
from uol_core.backends.base import KernelSource  # noqa: E402
from uol_core.hfl import load_target  # noqa: E402
from uol_core.ops import load_op  # noqa: E402
from uol_core.runtime.build import build, compiler_version  # noqa: E402
from uol_core.runtime.tuningdb import TuningDB  # noqa: E402

MIN_S = 0.4  # seconds of samples per measurement


def gflops(flops: float, seconds: float) -> float:
    return flops / seconds / 1e9


def interleaved(fns: dict, flops: float, min_seconds: float = MIN_S * 3) -> dict:
    """Time several callables in alternation so that a busy machine slows them alike, each
    round starting at the next one (A, B, C, then B, C, A, ...): in a fixed order the first
    always ran right after the last, and two copies of one kernel measured 4% apart (64x1024x
    256, first and third of four); returns per name the median GFLOP/s, ms and relative IQR."""
    import statistics
    for fn in fns.values():
        fn()
        fn()
    samples = {name: [] for name in fns}
    order = list(fns.items())
    start, turn = time.perf_counter(), 0
    while time.perf_counter() - start < min_seconds or min(map(len, samples.values())) < 7:
        for name, fn in order[turn % len(order):] + order[:turn % len(order)]:
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
        turn += 1
    out = {}
    for name, values in samples.items():
        q1, med, q3 = statistics.quantiles(values, n=4)
        out[name] = {"gflops": gflops(flops, med), "ms": med * 1e3, "spread": (q3 - q1) / med,
                     "repeats": len(values)}
    return out


NUMPY_CHILD = r"""
import json, sys, time, statistics
import numpy as np
from threadpoolctl import threadpool_info
m, n, k = map(int, sys.argv[1:4])
a = np.random.rand(m, k).astype(np.float32); b = np.random.rand(k, n).astype(np.float32)
for _ in range(2): a @ b
s = []; t0 = time.perf_counter()
while len(s) < 7 or time.perf_counter() - t0 < float(sys.argv[4]):
    t = time.perf_counter(); a @ b; s.append(time.perf_counter() - t)
info = [i for i in threadpool_info() if i.get("user_api") == "blas"]
print(json.dumps({"median_s": statistics.median(s), "blas": info}))
"""


def numpy_matmul(m: int, n: int, k: int, threads: int, ours, rounds: int = 3,
                 coretype: str | None = None) -> dict:
    """numpy in its own process (OpenBLAS picks its native kernel: no core-type overrides,
    unless `coretype` names one, e.g. Haswell for its AVX2 kernel; one BLAS thread pool only),
    alternated round by round with our kernel in this process."""
    import statistics
    env = {key: v for key, v in os.environ.items()
           if key not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    theirs, mine, blas = [], [], {}
    for _ in range(rounds):
        out = subprocess.run([sys.executable, "-c", NUMPY_CHILD, str(m), str(n), str(k),
                              str(MIN_S)], capture_output=True, text=True, env=env, timeout=600)
        data = json.loads(out.stdout.strip().splitlines()[-1])
        blas = data["blas"][0] if data["blas"] else {}
        theirs.append(data["median_s"])
        mine.append(interleaved({"ours": ours}, 2 * m * n * k, MIN_S)["ours"]["ms"] / 1e3)
    med, own = statistics.median(theirs), statistics.median(mine)
    return {"gflops": gflops(2 * m * n * k, med), "ms": med * 1e3,
            "ours_same_time_gflops": gflops(2 * m * n * k, own),
            "kernel": f"{blas.get('internal_api')} {blas.get('version')} "
                      f"{blas.get('architecture')}", "threads": blas.get("num_threads")}


FMA_PEAK_C = r"""
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
/* 12 independent FMA chains per thread: enough to cover 2 units x 4+ cycles of latency. */
void uol_fma_peak(void **args, const int64_t *strides)
{
    const int64_t iters = strides[0];
    float *out = (float *)args[0];
#pragma omp parallel num_threads(THREADS)
    {
        __m256 c[12];
        for (int i = 0; i < 12; ++i) c[i] = _mm256_set1_ps((float)i);
        const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
        for (int64_t t = 0; t < iters; ++t)
            for (int i = 0; i < 12; ++i) c[i] = _mm256_fmadd_ps(c[i], a, b);
        __m256 s = c[0];
        for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, c[i]);
        float tmp[8]; _mm256_storeu_ps(tmp, s);
        out[omp_get_thread_num()] = tmp[0];
    }
}
"""


def probe_fma_peak(threads: int) -> float:
    """GFLOP/s of an AVX2 FMA loop on `threads` threads (the ceiling a GEMM can reach here)."""
    import ctypes
    src = KernelSource(FMA_PEAK_C.replace("THREADS", str(threads)), "c", "uol_fma_peak",
                       "fma_peak", {"isa": "avx2"})
    fn = ctypes.CDLL(str(build(src))).uol_fma_peak
    out = torch.zeros(64)
    iters = 20_000_000
    ptrs = (ctypes.c_void_p * 1)(out.data_ptr())
    arg = (ctypes.c_int64 * 1)(iters)
    best = 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        fn(ptrs, arg)
        best = max(best, threads * iters * 12 * 8 * 2 / (time.perf_counter() - t0) / 1e9)
    return best


def _variant_line(report: dict, key: str, lead: str, config_key: str | None = None) -> list[str]:
    """A paragraph of ours/torch for the rows that also timed a variant of ours under `key`."""
    rows = [r for r in report["cases"] if key in r]
    if not rows:
        return []
    return ["", lead + "; ".join(
        f"{r['op']} " + "x".join(str(r["sizes"][k]) for k in ("B", "M", "N", "K") if k in r["sizes"])
        + f" {r[key]['gflops'] / r['torch']['gflops']:.2f}"
        + (f" ({r[config_key]})" if config_key else "") for r in rows) + "."]


def tuned_kernel(op, sizes, target, db, budget):
    session = open_session(op, sizes, target, db=db, min_seconds=0.2)
    try:
        result = session.tune(budget=budget)
        top1 = session.ranked()[0][0]
    finally:
        session.close()
    best = result.best or top1
    return best, top1, result


def best_packed_config(op, sizes, target):
    """The cost model's best config on the packed (BLIS) path."""
    from uol_core.backends.c.gemm.cost_model import CostModel
    from uol_core.backends.c.gemm.space import build_space
    from uol_core.plans.gemm import lower_contraction

    plan = lower_contraction(op, sizes)
    ranked = CostModel(plan, target).rank(build_space(plan, target).configs)
    return next(c for c, _ in ranked if c.path == "packed")


def run_gemm(name, sizes, target, db, threads, budget, compile_torch=True):
    op = load_op(name)
    m, n, k = sizes["M"], sizes["N"], sizes["K"]
    batch = sizes.get("B", 1)
    flops = 2 * batch * m * n * k
    best, top1, tune = tuned_kernel(op, sizes, target, db, budget)
    kern = uol_compile(op, shapes=sizes, target=target, config=best.to_dict())
    gen = torch.Generator().manual_seed(0)
    ins = {d.name: torch.randn(*[f.evaluate(sizes) for f in d.shape], generator=gen)
           for d in op.inputs}
    out = kern(**ins)
    row = {"op": name, "sizes": sizes, "flops": flops, "config": best.key(),
           "tune_measurements": tune.measurements}
    fns = {"ours": lambda: kern(out=out, **ins)}
    if top1.key() != best.key():  # the model's own pick, in the same run: tuning is noisy here
        model_kern = uol_compile(op, shapes=sizes, target=target, config=top1.to_dict())
        row["model_config"] = top1.key()
        fns["ours_model"] = lambda: model_kern(out=out, **ins)
    if best.path == "direct":  # the packed path these shapes ran before, in the same run
        packed = best_packed_config(op, sizes, target)
        packed_kern = uol_compile(op, shapes=sizes, target=target, config=packed.to_dict())
        row["packed_config"] = packed.key()
        fns["ours_packed"] = lambda: packed_kern(out=out, **ins)
    if name == "bmm":
        a, w = ins["A"], ins["W"]
        ref = torch.bmm(a, w)
        torch_out = torch.empty_like(ref)  # both write into an existing buffer
        fns["torch"] = lambda: torch.bmm(a, w, out=torch_out)
    elif name == "linear_bias_gelu":
        x, w, b = ins["X"], ins["W"], ins["b"]
        pre, post = torch.empty(m, n), torch.empty(m, n)  # both write into existing buffers

        def eager():
            torch.addmm(b, x, w, out=pre)
            return torch.ops.aten.gelu.out(pre, out=post)
        fns["torch"] = eager
        ref = eager().clone()
        if compile_torch:
            comp = torch.compile(lambda x, w, b: torch.nn.functional.gelu(x @ w + b))
            comp(x, w, b)
            fns["torch_compile"] = lambda: comp(x, w, b)
    else:
        a, b = ins["A"], ins["B"]
        ref = a @ b
        torch_out = torch.empty_like(ref)  # both write into an existing buffer
        fns["torch"] = lambda: torch.matmul(a, b, out=torch_out)
        if compile_torch:
            comp = torch.compile(lambda a, b: torch.matmul(a, b))
            comp(a, b)
            fns["torch_compile"] = lambda: comp(a, b)
    row.update(interleaved(fns, flops))
    if name == "matmul":
        row["numpy_openblas"] = numpy_matmul(m, n, k, threads, fns["ours"])
    row["max_abs_err_vs_torch"] = float((out - ref).abs().max())
    return row


def tuner_efficiency(target, threads, exhaustive_limit: int) -> dict:
    """Measurements the tuner needs to reach 90% of the best of an exhaustive run."""
    op, sizes = load_op("matmul"), {"M": 192, "N": 192, "K": 192}
    # A fresh database: rows of earlier runs (other load, other code) must not stand in for
    # this run's measurements.
    db = TuningDB(Path(tempfile.mkdtemp(prefix="uol-tuner-eff-")) / "tuning.sqlite")
    session = open_session(op, sizes, target, db=db, min_seconds=0.1)
    try:
        ranked = [c for c, _ in session.ranked()
                  if c.threads == threads and c.ku == 4 and c.pf == 0]
        if exhaustive_limit:
            ranked = ranked[:exhaustive_limit]
        results = {}
        for cfg in ranked:
            results[cfg] = session.measure(cfg).result.get("gflops") or 0.0
        # The maximum of 300 noisy measurements is biased upwards: measure the five best
        # again (a second fresh database) and let each count as the mean of its two runs.
        recheck = open_session(op, sizes, target, min_seconds=0.1, db=TuningDB(
            Path(tempfile.mkdtemp(prefix="uol-tuner-recheck-")) / "tuning.sqlite"))
        try:
            for cfg in sorted(results, key=results.get, reverse=True)[:5]:
                again = recheck.measure(cfg).result.get("gflops") or 0.0
                results[cfg] = (results[cfg] + again) / 2
        finally:
            recheck.close()
        best = max(results.values())
        top1 = results[ranked[0]]
        # A fresh tuning run over the same database: configs the exhaustive run measured are
        # answered from it (same numbers), any other config is measured now.
        live = open_session(op, sizes, target, db=db, min_seconds=0.1)
        try:
            run = live.tune(budget=10)
        finally:
            live.close()
        reached = next((i + 1 for i, t in enumerate(run.trials)
                        if (t.result.get("gflops") or 0) >= 0.9 * best), None)
    finally:
        session.close()
    return {"sizes": sizes, "exhaustive_configs": len(results),
            "exhaustive_subspace": f"every legal config with threads={threads}, ku=4, pf=0"
                                   + (f", model's top {exhaustive_limit}" if exhaustive_limit
                                      else ""), "exhaustive_best_gflops": best,
            "untuned_top1_gflops": top1, "top1_fraction_of_best": top1 / best,
            "tuner_measurements_to_90pct": reached,
            "tuner_best_fraction": run.best_gflops / best if best else 0.0}


def write_docs(report: dict, cmd: str, section_name: str = "CPU GEMM") -> None:
    slug = re.sub(r"\W+", "_", section_name.lower()).strip("_")
    out_json = ROOT / "docs" / "benchmarks" / f"{slug}.json"
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(report, indent=2))
    lines = [f"## {section_name}", "", f"Command: `{cmd}` ({report['date']}, {report['machine']}, "
             f"{report['threads']} threads, {report['compiler']}).", "",
             f"Host ISA (HFL host target): {report.get('isa', '-')}.", "",
             f"Probed fp32 FMA peak ({report.get('fma_peak_isa', 'AVX2')}, {report['threads']} "
             f"threads): {report['fma_peak_gflops']:.0f} GFLOP/s{_probes_note(report)}; HFL host target fp32 peak: "
             f"{report['hfl_peak_gflops']:.0f} GFLOP/s. Load average (other jobs on the "
             f"{os.cpu_count()} cores): {report.get('load_average_start', 0):.1f} at the start, "
             f"{report.get('load_average_end', 0):.1f} at the end.", "",
             "| case | ours GF/s | torch GF/s | numpy (OpenBLAS) GF/s | torch.compile GF/s | "
             "ours/torch | ours/numpy | ours/compile | % FMA peak |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["cases"]:
        s = r["sizes"]
        case = f"{r['op']} " + "x".join(str(s[k]) for k in ("B", "M", "N", "K") if k in s)
        ours, tor = r["ours"]["gflops"], r["torch"]["gflops"]
        npy = r.get("numpy_openblas", {}).get("gflops")
        # against numpy, the ratio uses our rounds alternated with numpy's processes
        vs_np = r["numpy_openblas"]["ours_same_time_gflops"] / npy if npy else None
        comp = r.get("torch_compile", {}).get("gflops")
        lines.append(
            f"| {case} | {ours:.0f} | {tor:.0f} | {f'{npy:.0f}' if npy else '-'} | "
            f"{f'{comp:.0f}' if comp else '-'} | {ours / tor:.2f} | "
            f"{f'{vs_np:.2f}' if npy else '-'} | {f'{ours / comp:.2f}' if comp else '-'} | "
            f"{100 * ours / report['fma_peak_gflops']:.0f}% |")
    lines += _variant_line(report, "ours_packed", "Packed path in the same run (the model's best "
                           "packed config, the path these shapes took before the direct path "
                           "existed), ours/torch: ")
    lines += _variant_line(report, "ours_model", "The cost model's own pick where the tune chose "
                           "another config, in the same run, ours/torch: ", "model_config")
    numpy_kernel = next((r["numpy_openblas"]["kernel"] for r in report["cases"]
                         if "numpy_openblas" in r), "-")
    lines += ["", f"numpy BLAS kernel (threadpoolctl): {numpy_kernel}. Each row alternates the "
                  "contenders call by call (ours, torch, torch.compile; numpy runs in its own "
                  "process, alternated round by round with ours), so that load from other "
                  "processes hits them alike."]
    te = report.get("tuner")
    if te:
        lines += ["", f"Tuner (matmul {te['sizes']}): exhaustive run over "
                      f"{te['exhaustive_configs']} configs ({te['exhaustive_subspace']}), best {te['exhaustive_best_gflops']:.0f}"
                      " GFLOP/s (its five best measured twice, each the mean of both); "
                      + (f"the tuner reached 90% of it after {te['tuner_measurements_to_90pct']} "
                         "measurements" if te["tuner_measurements_to_90pct"] else
                         "the tuner did not reach 90% of it within its 10 measurements (best "
                         f"{100 * te['tuner_best_fraction']:.0f}%)")
                      + f"; the untuned model top-1 gets {100 * te['top1_fraction_of_best']:.0f}% of it."]
    if report.get("bf16"):
        lines += bf16_lines(report["bf16"], report["peaks"])
    lines += ["", "Configs chosen: " + "; ".join(f"{r['op']}: {r['config']}"
                                                 for r in report["cases"]), ""]
    replace_section("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, no torch.compile")
    parser.add_argument("--small", action="store_true",
                        help="only the small and skinny rows (M or N <= 128, batched small "
                             "products); no bf16 rows, no tuner check")
    parser.add_argument("--budget", type=int, default=10, help="tuner measurements per case")
    parser.add_argument("--exhaustive", type=int, default=0,
                        help="cap on the configs of the exhaustive run (0: every config with "
                             "ku=4, pf=0 on all threads)")
    parser.add_argument("--threads", type=int, default=0,
                        help="threads for every contender (default: the target's cores)")
    parser.add_argument("--no-tuner-check", action="store_true",
                        help="skip the exhaustive tuner-efficiency run")
    parser.add_argument("--section", default="CPU GEMM", help="docs/benchmarks.md section")
    args = parser.parse_args()
    target = load_target("host")
    threads = args.threads or target.cores
    if threads != target.cores:  # the same target with fewer cores: kernels use `threads`
        import copy
        target = copy.copy(target)
        target.cores = threads
    torch.set_num_threads(threads)
    db = TuningDB(Path(tempfile.gettempdir()) / "uol-bench-tuning.sqlite")
    cases = [("matmul", {"M": s, "N": s, "K": s}) for s in (512, 1024, 2048)]
    cases += [("matmul", {"M": 1000, "N": 777, "K": 513}),
              ("linear_bias_gelu", {"M": 1024, "N": 1024, "K": 1024}),
              ("bmm", {"B": 8, "M": 256, "N": 256, "K": 256})]
    # small and skinny: the SiLU MLP's fc1 (64 rows, 256 -> 1024), a decode step's 8 rows, a
    # 128 x 128 output over a deep k, many small batched products
    small = [("matmul", {"M": 64, "N": 1024, "K": 256}),
             ("matmul", {"M": 8, "N": 4096, "K": 4096}),
             ("matmul", {"M": 128, "N": 128, "K": 8192}),
             ("bmm", {"B": 32, "M": 64, "N": 64, "K": 64})]
    # a classifier head (one column panel) and a depth-split shape: the direct path's row
    # and depth splits (the small set only)
    heads = [("matmul", {"M": 128, "N": 10, "K": 256}), ("matmul", {"M": 16, "N": 64, "K": 512})]
    cases = small + heads if args.small else cases + small
    if args.quick:
        cases = [("matmul", {"M": 256, "N": 256, "K": 256}),
                 ("linear_bias_gelu", {"M": 128, "N": 128, "K": 128})]
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": platform.processor()
              or platform.machine(), "threads": threads, "compiler": compiler_version(),
              "torch": torch.__version__, "hfl_peak_gflops": target.peak_gflops["fp32"],
              "fma_peak_gflops": probe_fma_peak(threads), "cases": [],
              "load_average_start": os.getloadavg()[0], "isa": " ".join(target.isa),
              "peaks": probe_peaks(target.isa, threads)}
    if report["peaks"].get("fp32_avx512", 0) > report["fma_peak_gflops"]:
        report["fma_peak_gflops"], report["fma_peak_isa"] = (report["peaks"]["fp32_avx512"],
                                                             "AVX-512")
    for name, sizes in cases:
        row = run_gemm(name, sizes, target, db, threads, args.budget, not args.quick)
        report["cases"].append(row)
        print(json.dumps({k: row[k] for k in ("op", "sizes", "ours", "torch")}
                         | {k: row[k]["gflops"] for k in ("numpy_openblas", "torch_compile")
                            if k in row}), flush=True)
    if {"amx_bf16", "avx512_bf16"} & set(target.isa) and not (args.quick or args.small):
        # bf16 rows only where the host has bf16 hardware (a widened-f32 kernel elsewhere)
        report["bf16"] = bf16_rows(target, threads, interleaved)
        for row in report["bf16"]:
            print(json.dumps({k: row[k] for k in ("sizes", "bf16_isa", "ours", "torch")}),
                  flush=True)
    if not (args.quick or args.small or args.no_tuner_check):
        report["tuner"] = tuner_efficiency(target, threads, args.exhaustive)
        print(json.dumps(report["tuner"]), flush=True)
    report["load_average_end"] = os.getloadavg()[0]
    settle_peaks(report, target, threads)
    cmd = "python " + shlex.join(["benchmarks/cpu_gemm.py", *sys.argv[1:]])
    write_docs(report, cmd, args.section)


def _probes_note(report: dict) -> str:
    """Which probes the peak comes from (runs written before the end probe have one)."""
    probes = report.get("peak_probes")
    if not probes:
        return ""
    start, end = (max(p["fma"], p.get("fp32_avx512", 0.0)) for p in (probes["start"], probes["end"]))
    return f" (the higher of two probes: {start:.0f} at the start of the run, {end:.0f} at its end)"


def settle_peaks(report: dict, target, threads: int) -> None:
    """Probe the peaks again at the end and keep the higher of each: a peak is what the
    machine can do, and a probe that ran while other jobs held the cores says less (one start
    probe here read 235 GFLOP/s where the machine had read 335 an hour before, and put a
    GEMM at 103% of it). Both probes stay in the report."""
    end = {"fma": probe_fma_peak(threads), **probe_peaks(target.isa, threads)}
    report["peak_probes"] = {"start": {"fma": report["fma_peak_gflops"], **report["peaks"]},
                             "end": end}
    report["peaks"] = {k: max(v, end.get(k, 0.0)) for k, v in report["peaks"].items()}
    best = max(end["fma"], report["fma_peak_gflops"], report["peaks"].get("fp32_avx512", 0.0))
    if best > report["fma_peak_gflops"]:
        report["fma_peak_gflops"] = best
        if best == report["peaks"].get("fp32_avx512"):
            report["fma_peak_isa"] = "AVX-512"


if __name__ == "__main__":
    main()
