"""bf16 GEMM template (backends/c/gemm/bf16.py): recognition, emitted code of every micro-kernel
(golden, any host), results against a float64 reference where the host has the ISA, routing,
and the HFL matrix-unit facts it reads."""

from __future__ import annotations

import re

import pytest
import torch

import uol_core
from uol_core.backends.c.gemm import bf16 as c_gemm_bf16
from uol_core.backends.c.native import CKernel
from uol_core.hfl import load_target
from uol_core.hfl.matrix import peak_gflops, unit_for
from uol_core.odl import parse
from uol_core.odl.shapes import bind_sizes

LINEAR = """op linear_bf16(X: bf16[M, K], W: bf16[N, K]) -> Y: bf16[M, N]:
    Y[m, n] = sum[k](X[m, k] * W[n, k])
"""
MATMUL = """op mm_bf16(A: bf16[M, K], B: bf16[K, N]) -> C: f32[M, N]:
    C[m, n] = sum[k](A[m, k] * B[k, n])
"""
BATCHED = """op bmm_bf16(A: bf16[B, M, K], W: bf16[B, K, N]) -> C: f32[B, M, N]:
    C[b, m, n] = sum[k](A[b, m, k] * W[b, k, n])
"""
SHARED_WEIGHT = """op seq_linear(X: bf16[B, M, K], W: bf16[K, N]) -> Y: bf16[B, M, N]:
    Y[b, m, n] = sum[k](X[b, m, k] * W[k, n])
"""
SHARED_B_STRIDED_A = """op bshared(A: bf16[M, B, K], W: bf16[K, N]) -> C: f32[B, M, N]:
    C[b, m, n] = sum[k](A[m, b, k] * W[k, n])
"""
TRANSPOSED_A = """op mm_ta(A: bf16[K, M], B: bf16[N, K]) -> C: f32[N, M]:
    C[n, m] = sum[k](A[k, m] * B[n, k])
"""
HOST = load_target("host")
NEEDS = {"amx": {"amx_tile", "amx_bf16"}, "avx512bf16": {"avx512_bf16", "avx512bw"}, "f32": set()}


def _sizes(text: str, shapes: dict) -> tuple:
    op = parse(text)
    return op, bind_sizes(op, shapes)


@pytest.mark.parametrize("isa", ["amx", "avx512bf16", "f32"])
def test_emitted_code_is_golden(golden, isa):
    op, sizes = _sizes(LINEAR, {"X": (40, 70), "W": (50, 70)})
    src = c_gemm_bf16.emit(op, sizes, load_target("xeon-spr-8480"), {"bf16_isa": isa, "threads": 2})
    golden(f"c/bf16/linear_{isa}.c", src.text)
    assert src.meta["bf16_isa"] == isa and src.meta["outputs"] == ["Y"]


def test_host_unit_comes_from_the_hfl():
    spr, desktop = load_target("xeon-spr-8480"), load_target("avx2-desktop")
    unit = unit_for(spr)
    assert unit is not None and unit.flag == "amx_bf16" and unit.fact("tiles") == 8
    assert unit_for(desktop) is None
    assert c_gemm_bf16.choose_isa(spr) == "amx" and c_gemm_bf16.choose_isa(desktop) == "f32"
    value, how = peak_gflops(spr, unit)
    assert value == pytest.approx(56 * 2.0 * 1024) and "Optimization Reference Manual" in how
    with pytest.raises(ValueError, match="bf16_isa"):
        c_gemm_bf16.choose_isa(spr, {"bf16_isa": "sse"})


def test_only_bf16_gemms_match():
    f32_op, sizes = _sizes(MATMUL.replace("bf16", "f32"), {"A": (8, 8), "B": (8, 8)})
    assert c_gemm_bf16.match(f32_op, sizes) is None
    scaled, sizes = _sizes(MATMUL.replace("sum[k](A[m, k] * B[k, n])",
                                          "sum[k](A[m, k] * B[k, n]) * 0.5"),
                           {"A": (8, 8), "B": (8, 8)})
    assert c_gemm_bf16.match(scaled, sizes) is None
    seq, sizes = _sizes(SHARED_WEIGHT, {"X": (3, 10, 16), "W": (16, 12)})
    gemm = c_gemm_bf16.match(seq, sizes)
    # the batch the weight is shared over folds into m: one 30-row GEMM
    assert gemm is not None and (gemm.M, gemm.N, gemm.K, gemm.batch) == (30, 12, 16, ())
    strided, sizes = _sizes(SHARED_B_STRIDED_A, {"A": (20, 3, 40), "W": (40, 24)})
    gemm = c_gemm_bf16.match(strided, sizes)
    # A's rows are 3 x 40 apart, so the batch stays a batch; B (stride 0 in it) is packed once
    assert gemm.batch == ((3, 40, 0, 20 * 24),) and gemm.a_mk == (120, 1)
    assert "#define B_SHARED 1" in c_gemm_bf16.emit(strided, sizes, None).text


CASES = [(MATMUL, {"A": (64, 96), "B": (96, 64)}), (MATMUL, {"A": (37, 50), "B": (50, 45)}),
         (MATMUL, {"A": (48, 64), "B": (64, 40)}),  # A in place, whole blocks
         (MATMUL, {"A": (30, 2048), "B": (2048, 20)}),  # rows 4 KiB apart: packed, padded rows
         (LINEAR, {"X": (70, 130), "W": (33, 130)}), (TRANSPOSED_A, {"A": (33, 40), "B": (20, 33)}),
         (BATCHED, {"A": (3, 40, 64), "W": (3, 64, 50)}),
         (SHARED_WEIGHT, {"X": (2, 40, 24), "W": (24, 50)}),
         (SHARED_B_STRIDED_A, {"A": (20, 3, 40), "W": (40, 24)})]  # B packed once, 3 GEMMs


@pytest.mark.parametrize("isa", ["amx", "avx512bf16", "f32"])
def test_results_match_float64(isa):
    missing = NEEDS[isa] - set(HOST.isa)
    if missing:
        pytest.skip(f"this host lacks {', '.join(sorted(missing))} (the {isa} kernel is "
                    "golden-tested above)")
    gen = torch.Generator().manual_seed(0)
    for text, shapes in CASES:
        op, sizes = _sizes(text, shapes)
        kernel = CKernel(c_gemm_bf16.emit(op, sizes, HOST, {"bf16_isa": isa}), op, sizes)
        ins = {n: torch.randn(s, generator=gen).bfloat16() for n, s in shapes.items()}
        got = kernel.run(ins)[op.outputs[0].name]
        ref = uol_core.compile(text, shapes=shapes, backend="reference")(
            **{n: t.double() for n, t in ins.items()})
        ref = ref if isinstance(ref, torch.Tensor) else next(iter(ref.values()))
        if got.dtype == torch.bfloat16:  # one bf16 rounding of an f32 sum: within 2 ulp
            torch.testing.assert_close(got.double(), ref.double(), rtol=2 ** -7, atol=1e-2)
        else:  # exact bf16 products summed in f32
            torch.testing.assert_close(got.double(), ref.double(), rtol=1e-5, atol=1e-4)


def test_a_is_read_in_place_unless_its_rows_alias_or_k_is_ragged():
    def route(shapes: dict, isa: str = "avx512bf16") -> str:
        op, sizes = _sizes(MATMUL, shapes)
        text = c_gemm_bf16.emit(op, sizes, None, {"bf16_isa": isa, "threads": 2}).text
        return re.search(r"; A (.*?); \d+ B panel", text, re.S).group(1)

    assert route({"A": (48, 64), "B": (64, 40)}) == "read in place"
    # 64 rows are 5 blocks of 12 and 4 rows: those come from a padded copy
    assert route({"A": (64, 96), "B": (96, 64)}) == \
        "read in place, its last 4 row(s) from a zero-padded copy"
    # AMX tile loads read whole 32-row blocks: a short one packs all of A
    assert route({"A": (40, 64), "B": (64, 32)}, "amx").startswith("packed")
    assert "K=50 not a multiple of 32" in route({"A": (37, 50), "B": (50, 45)})
    # rows 4 KiB apart share L1 sets: A is packed with one cache line more per row
    assert "rows 2080 elements apart; rows 4096 bytes apart" in \
        route({"A": (30, 2048), "B": (2048, 20)})


def test_the_run_worker_verifies_a_bf16_gemm_on_bf16_inputs():
    """The IDE's Run and the tuner go through the worker: it draws each input in its declared
    dtype and calls the kernel with them (f32 data read as bf16 pairs gave inf)."""
    from uol_core.runtime.worker import execute_job, make_job

    op, sizes = _sizes(MATMUL, {"A": (100, 96), "B": (96, 64)})
    src = c_gemm_bf16.emit(op, sizes, HOST, {"bf16_isa": "f32", "threads": 2})
    result = execute_job(make_job(src, MATMUL, "mm_bf16.odl", dict(sizes), repeats=2,
                                  min_seconds=0.0))
    assert result["status"] == "ok", result
    assert result["max_abs_err"] < 1e-3 and result["median_s"] > 0


@pytest.mark.parametrize("target, unit", [("xeon-spr-8480", "amx"),
                                          ("epyc-turin-9755", "avx512bf16"),
                                          ("avx2-desktop", "f32")])
def test_the_space_offers_the_knobs_the_template_reads(target, unit):
    """bf16_isa and threads, nothing else; a unit the target lacks is forbidden by a named rule
    and the model picks the first unit isa.toml lists for the target."""
    from uol_core.backends import get_backend

    c = get_backend("c")
    op, sizes = _sizes(MATMUL, {"A": (64, 96), "B": (96, 64)})
    plan = c.plan(op, sizes, target)
    choice = c.choose(plan)
    assert set(choice.space.domains) == {"threads", "bf16_isa"}
    assert choice.config["bf16_isa"] == unit
    usable = {cfg["bf16_isa"] for cfg in choice.space.configs}
    assert unit in usable and ("amx" in usable) == (unit == "amx")
    rule = next(r for r in choice.space.constraints if r.name == "matrix unit")
    assert rule.provenance == ("isa",)
    # another legal unit is one knob away, and it emits its own micro-kernel
    src = c.emit(plan, {**choice.config, "bf16_isa": "f32"})
    assert src.meta["bf16_isa"] == "f32" and src.config["bf16_isa"] == "f32"
    # a bf16 op that is not a GEMM goes to the pattern templates, with their knobs
    add, add_sizes = _sizes("op addb(X: bf16[N], Y: bf16[N]) -> Z: bf16[N]:\n"
                            "    Z[i] = X[i] + Y[i]\n", {"X": (1000,), "Y": (1000,)})
    assert "bf16_isa" not in c.choose(c.plan(add, add_sizes, target)).space.domains


def test_c_backend_routes_bf16_gemms_to_the_template():
    kernel = uol_core.compile(LINEAR, shapes={"X": (16, 32), "W": (24, 32)}, backend="c")
    assert kernel.kernel_source.meta["generator"] == c_gemm_bf16.GENERATOR_VERSION
    x, w = torch.randn(16, 32).bfloat16(), torch.randn(24, 32).bfloat16()
    got = kernel(X=x, W=w)
    torch.testing.assert_close(got.float(), (x.float() @ w.float().T).bfloat16().float(),
                               rtol=2 ** -7, atol=1e-2)


def test_default_dispatch_runs_bf16_gemms_in_c_and_declines_other_bf16_ops():
    from uol_core.runtime.dispatch import OpRunner

    x, w = torch.randn(16, 32).bfloat16(), torch.randn(24, 32).bfloat16()
    runner = OpRunner(parse(LINEAR))  # backend "auto": C on a CPU target
    got = runner({"X": x, "W": w})["Y"]
    assert runner.backend_for({"X": x, "W": w}) == "c" and got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), (x.float() @ w.float().T).bfloat16().float(),
                               rtol=2 ** -7, atol=1e-2)
    relu = OpRunner(parse("op relu_bf16(X: bf16[R, C]) -> Y: bf16[R, C]:\n"
                          "    Y[r, c] = max(X[r, c], 0.0)\n"))
    out = relu({"X": x})["Y"]
    assert relu.backend_for({"X": x}) != "c" and torch.equal(out.float(), x.float().clamp(min=0))
    assert "only as a GEMM" in next(iter(relu.reason.values()))
    f32_op = OpRunner(parse(MATMUL.replace("bf16", "f32")))  # bf16 data for f32 declarations
    f32_op({"A": x, "B": w.T.contiguous()})
    assert "declare them bf16" in next(iter(f32_op.reason.values()))


def test_amx_source_builds_on_any_x86_host():
    """The target pragma enables AMX intrinsics without -march support, so the kernel of an AMX
    target builds (not runs) on an AVX2 build machine too."""
    import platform

    from uol_core.runtime.build import build

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"AMX intrinsics are x86-64 only (this host is {platform.machine()})")
    op, sizes = _sizes(MATMUL, {"A": (32, 64), "B": (64, 32)})
    src = c_gemm_bf16.emit(op, sizes, load_target("xeon-spr-8480"), {"threads": 1})
    assert src.meta["bf16_isa"] == "amx" and build(src).exists()


def test_host_probe_records_the_matrix_unit():
    """A probed host with AMX gets its bf16 peak (documented rate at the measured clock) and
    tile shape, with the isa.toml sources; a host without one gets neither."""
    from uol_core.hfl import probe
    from uol_core.hfl.crosscheck import CheckedFact, CoreFacts

    core = CoreFacts(CheckedFact(2.5, "measured", "clock"), CheckedFact(4, "assumed", "lat"),
                     CheckedFact(2, "measured", "units"))
    record: dict = {"peak_gflops": {}}
    probe._matrix_facts(record, ["avx512f", "amx_tile", "amx_bf16"], 2, core)
    assert record["peak_gflops"]["bf16"]["value"] == pytest.approx(2 * 2.5 * 1024)
    assert "Optimization Reference Manual" in record["peak_gflops"]["bf16"]["source"]
    assert record["mma_shapes"]["bf16"]["value"] == [[16, 16, 32]]
    plain: dict = {"peak_gflops": {}}
    probe._matrix_facts(plain, ["avx2", "fma"], 2, core)
    assert plain == {"peak_gflops": {}}
