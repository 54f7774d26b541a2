"""bf16 rows of the CPU GEMM benchmark (benchmarks/cpu_gemm.py) and the peaks they are read
against: the widest FMA loop the host runs (AVX-512 where it has it), the AMX tile product loop
and the VDPBF16PS loop, each probed on the benchmark's threads.

The unit facts (tile geometry, the Linux permission request) come from the HFL's isa.toml
[[matrix_isa]] entries; a unit the host lacks is not probed and its rows are left out.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable

import torch

from uol_core.backends.base import KernelSource
from uol_core.backends.c.gemm import bf16 as c_gemm_bf16
from uol_core.backends.c.native import CKernel
from uol_core.hfl.matrix import matrix_units
from uol_core.odl import parse
from uol_core.runtime.build import build

FMA512_C = r"""
#include <omp.h>
#include <stdint.h>
typedef float v16 __attribute__((vector_size(64)));
/* 16 independent 512-bit FMA chains per thread: 2 units x 4+ cycles of latency, and more. */
void uol_fma512_peak(void **args, const int64_t *strides)
{
    const int64_t iters = strides[0];
    float *out = (float *)args[0];
#pragma omp parallel num_threads(THREADS)
    {
        v16 c[16];
        for (int i = 0; i < 16; ++i) c[i] = (v16){0} + (float)i;
        const v16 a = (v16){0} + 0.999999f, b = (v16){0} + 1e-7f;
        for (int64_t t = 0; t < iters; ++t)
            for (int i = 0; i < 16; ++i) c[i] = c[i] * a + b;
        v16 s = c[0];
        for (int i = 1; i < 16; ++i) s += c[i];
        out[omp_get_thread_num()] = s[0];
    }
}
"""

DPBF16_C = r"""
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#pragma GCC target("avx512f,avx512bf16")
/* 16 independent VDPBF16PS chains per thread (64 FLOP each). */
void uol_dpbf16_peak(void **args, const int64_t *strides)
{
    const int64_t iters = strides[0];
    float *out = (float *)args[0];
#pragma omp parallel num_threads(THREADS)
    {
        __m512 c[16];
        for (int i = 0; i < 16; ++i) c[i] = _mm512_set1_ps((float)i);
        const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80);
        for (int64_t t = 0; t < iters; ++t)
            for (int i = 0; i < 16; ++i) c[i] = _mm512_dpbf16_ps(c[i], a, a);
        __m512 s = c[0];
        for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, c[i]);
        out[omp_get_thread_num()] = _mm512_reduce_add_ps(s);
    }
}
"""


def _amx_peak_source(threads: int) -> str:
    unit = next(u for u in matrix_units("bf16") if u.flag == "amx_bf16")
    perm = unit.fact("os_permission")
    return f"""
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#pragma GCC target("amx-tile,amx-bf16")
/* Four independent TDPBF16PS accumulators per thread on tiles of {unit.fact('tile_rows')} rows
   x {unit.fact('tile_colsb')} bytes ({unit.fact('mnk')} per product). */
void uol_amx_peak(void **args, const int64_t *strides)
{{
    const int64_t iters = strides[0];
    float *out = (float *)args[0];
    if (syscall(SYS_arch_prctl, {perm['arch_prctl']:#x}, {perm['xfeature']}) != 0) {{ out[0] = -1.0f; return; }}
#pragma omp parallel num_threads({threads})
    {{
        struct {{ uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; }} cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.palette = {unit.fact('palette')};
        for (int t = 0; t < 8; ++t) {{ cfg.rows[t] = {unit.fact('tile_rows')}; cfg.colsb[t] = {unit.fact('tile_colsb')}; }}
        _tile_loadconfig(&cfg);
        uint16_t ones[16 * 32] __attribute__((aligned(64)));
        for (int i = 0; i < 16 * 32; ++i) ones[i] = 0x3f80;  /* bf16 1.0: no all-zero tiles */
        float tile[16 * 16];
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        _tile_loadd(4, ones, 64); _tile_loadd(5, ones, 64); _tile_loadd(6, ones, 64); _tile_loadd(7, ones, 64);
        for (int64_t t = 0; t < iters; ++t) {{
            _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
        }}
        _tile_stored(0, tile, 64);
        out[1 + omp_get_thread_num()] = tile[0];
        _tile_release();
    }}
}}
"""


def _probe(text: str, entry: str, isa: str, iters: int, flop_per_iter: float) -> float:
    """GFLOP/s of a peak loop: the best of five timed runs."""
    src = KernelSource(text, "c", entry, entry, {"isa": isa})
    fn = getattr(ctypes.CDLL(str(build(src))), entry)
    out = torch.zeros(64)
    ptrs = (ctypes.c_void_p * 1)(out.data_ptr())
    arg = (ctypes.c_int64 * 1)(iters)
    best = 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        fn(ptrs, arg)
        if out[0] < 0:
            return 0.0  # the OS refused AMX tile data
        best = max(best, iters * flop_per_iter / (time.perf_counter() - t0) / 1e9)
    return best


def probe_peaks(isa: list[str], threads: int) -> dict[str, float]:
    """Probed GFLOP/s on `threads` threads of the units the host has (fp32 FMA at 512 bits,
    AMX bf16, VDPBF16PS)."""
    peaks: dict[str, float] = {}
    if "avx512f" in isa:
        peaks["fp32_avx512"] = _probe(FMA512_C.replace("THREADS", str(threads)),
                                      "uol_fma512_peak", "avx512", 5_000_000,
                                      threads * 16 * 16 * 2)
    if {"amx_tile", "amx_bf16"} <= set(isa):
        unit = next(u for u in matrix_units("bf16") if u.flag == "amx_bf16")
        m, n, k = unit.fact("mnk")
        peaks["bf16_amx"] = _probe(_amx_peak_source(threads), "uol_amx_peak", "avx512",
                                   200_000, threads * 4 * 2 * m * n * k)
    if "avx512_bf16" in isa:
        peaks["bf16_avx512"] = _probe(DPBF16_C.replace("THREADS", str(threads)),
                                      "uol_dpbf16_peak", "avx512", 500_000, threads * 16 * 64)
    return peaks


BF16_OP = """op mm_bf16(A: bf16[M, K], B: bf16[K, N]) -> C: bf16[M, N]:
    C[m, n] = sum[k](A[m, k] * B[k, n])
"""
BF16_CASES = [(2048, 2048, 2048), (1024, 1024, 1024), (1000, 777, 513), (64, 1024, 256)]


def bf16_rows(target, threads: int, interleaved: Callable[[dict, float], dict]) -> list[dict]:
    """bf16 GEMM (bf16 in and out, f32 accumulation): ours (the unit the HFL names for the
    host) against torch.matmul on bf16 tensors (oneDNN), alternated call by call."""
    op = parse(BF16_OP)
    rows = []
    gen = torch.Generator().manual_seed(0)
    for m, n, k in BF16_CASES:
        sizes = {"M": m, "N": n, "K": k}
        src = c_gemm_bf16.emit(op, sizes, target, {"threads": threads})
        kernel = CKernel(src, op, sizes)
        a = torch.randn(m, k, generator=gen).bfloat16()
        b = torch.randn(k, n, generator=gen).bfloat16()
        out = kernel.outputs_like()
        got = kernel.run({"A": a, "B": b}, out)["C"]
        ref = a.double() @ b.double()
        row = {"op": "mm_bf16", "sizes": sizes, "flops": 2 * m * n * k,
               "bf16_isa": src.meta["bf16_isa"],
               "max_rel_err_vs_f64": float((got.double() - ref).abs().max() / ref.abs().max())}
        ins = {"A": a, "B": b}
        fns = {"ours": lambda k=kernel, i=ins, o=out: k.run(i, o),
               "torch": lambda x=a, y=b: torch.matmul(x, y)}
        if threads > 1:  # AMX units shared between vCPUs: one thread can beat two
            single = CKernel(c_gemm_bf16.emit(op, sizes, target, {"threads": 1}), op, sizes)
            fns["ours_1_thread"] = lambda k=single, i=ins, o=single.outputs_like(): k.run(i, o)
        row.update(interleaved(fns, 2 * m * n * k))
        rows.append(row)
    return rows


def bf16_lines(rows: list[dict], peaks: dict[str, float]) -> list[str]:
    """The bf16 table of docs/benchmarks.md."""
    peak = peaks.get("bf16_amx") or peaks.get("bf16_avx512")
    lines = ["", "bf16 GEMM (bf16 inputs and output, f32 accumulation; torch.matmul on bf16 "
                 "tensors is the peer): probed peaks "
             + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peaks.items() if k.startswith("bf16"))
             + ".", "",
             "| case | kernel | ours GF/s | ours, 1 thread GF/s | torch GF/s | ours/torch | "
             "best of ours/torch | % bf16 peak | max rel err |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s = r["sizes"]
        ours, tor = r["ours"]["gflops"], r["torch"]["gflops"]
        one = r.get("ours_1_thread", {}).get("gflops")
        best = max(ours, one or 0.0)
        lines.append(f"| {s['M']}x{s['N']}x{s['K']} | {r['bf16_isa']} | {ours:.0f} | "
                     f"{f'{one:.0f}' if one else '-'} | {tor:.0f} | {ours / tor:.2f} | "
                     f"{best / tor:.2f} | {f'{100 * best / peak:.0f}%' if peak else '-'} | "
                     f"{r['max_rel_err_vs_f64']:.1e} |")
    return lines
