"""Roofline against hand-computed cases: a matmul (compute-bound) and a softmax (memory-bound)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from uol_cli.main import app
from uol_core.hfl import HflError, load_target
from uol_core.hfl.roofline import roofline
from uol_core.hfl.schema import validate


def toy_target(peak_fp32: float = 100.0, bandwidth: float = 20.0):
    """A CPU with round numbers: ridge point = 100 / 20 = 5 FLOP/byte."""
    def e(v):
        return {"value": v, "prov": "assumed", "source": "test"}
    record = {"name": "toy", "kind": "cpu", "isa": e(["avx2"]), "cores": e(2),
              "vector_bits": e(256), "vector_registers": e(16), "fma_units": e(2),
              "fma_latency_cycles": e(4), "l1d_bytes": e(32768), "l2_bytes": e(524288),
              "line_bytes": e(64), "peak_gflops": {"fp32": e(peak_fp32), "fp64": e(50.0)},
              "mem_bandwidth_gbps": e(bandwidth)}
    return validate(record, "toy.toml")


def test_matmul_1024_is_compute_bound_on_h100() -> None:
    n = 1024
    flops = 2 * n ** 3                       # 2,147,483,648
    bytes_moved = 3 * n * n * 4              # A, B read once, C written once: 12,582,912
    r = roofline(flops, bytes_moved, load_target("h100-sxm"))
    assert r.intensity == pytest.approx(2 * n / 12)           # 170.67 FLOP/byte
    assert r.ridge_intensity == pytest.approx(67000 / 3350)   # 20 FLOP/byte
    assert r.bound == "compute"
    assert r.attainable_gflops == pytest.approx(67000)
    assert r.min_seconds == pytest.approx(flops / 67e12)      # 32.05 us
    measured = roofline(flops, bytes_moved, load_target("h100-sxm"), seconds=64.1e-6)
    assert measured.achieved_gflops == pytest.approx(flops / 64.1e-6 / 1e9)
    assert measured.fraction_of_roofline == pytest.approx(0.5, rel=1e-3)


def test_softmax_is_memory_bound_on_toy_target() -> None:
    rows, cols = 4096, 1024
    # per element: max, subtract, exp, add to the sum, divide = 5 FLOP; read X once, write Y once
    flops = 5 * rows * cols                  # 20,971,520
    bytes_moved = 2 * rows * cols * 4        # 33,554,432
    r = roofline(flops, bytes_moved, toy_target())
    assert r.intensity == pytest.approx(0.625)
    assert r.ridge_intensity == pytest.approx(5.0)
    assert r.bound == "memory"
    assert r.attainable_gflops == pytest.approx(0.625 * 20)    # 12.5 GFLOP/s
    assert r.min_seconds == pytest.approx(bytes_moved / 20e9)  # 1.678 ms
    half = roofline(flops, bytes_moved, toy_target(), seconds=2 * bytes_moved / 20e9)
    assert half.fraction_of_roofline == pytest.approx(0.5)
    assert half.achieved_gflops == pytest.approx(6.25)


def test_small_matmul_on_toy_target_crosses_the_ridge() -> None:
    # 8x8x8: 1024 FLOP over 768 bytes = 1.33 FLOP/byte < ridge 5 -> memory-bound
    small = roofline(2 * 8 ** 3, 3 * 64 * 4, toy_target())
    assert small.bound == "memory"
    assert small.attainable_gflops == pytest.approx(1024 / 768 * 20)
    # 256^3: 85.3 FLOP/byte > 5 -> compute-bound at the 100 GFLOP/s peak
    big = roofline(2 * 256 ** 3, 3 * 256 * 256 * 4, toy_target())
    assert big.bound == "compute" and big.attainable_gflops == pytest.approx(100.0)


def test_dtype_selects_the_peak_and_missing_dtype_is_an_hfl_error() -> None:
    h100 = load_target("h100-sxm")
    assert roofline(1e12, 1e6, h100, dtype="bf16").attainable_gflops == pytest.approx(989400)
    with pytest.raises(HflError, match=r"peak_gflops\.tf32"):
        roofline(1.0, 1.0, toy_target(), dtype="tf32")
    with pytest.raises(ValueError):
        roofline(1.0, 1.0, toy_target(), seconds=0)


def test_cli_roofline_json_matches_the_cost_model() -> None:
    result = CliRunner().invoke(app, ["hw", "roofline", "matmul", "--shape", "M=64,N=32,K=16",
                                      "--target", "h100-sxm", "--seconds", "1e-6", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["flops"] == 2 * 64 * 32 * 16
    assert data["bytes_moved"] == 4 * (64 * 16 + 16 * 32 + 64 * 32)
    assert data["bound"] == "memory" and data["dtype"] == "fp32"
    assert data["fraction_of_roofline"] == pytest.approx(data["min_seconds"] / 1e-6)


def test_cli_roofline_errors_exit_2_with_a_message() -> None:
    runner = CliRunner()
    bad_shape = runner.invoke(app, ["hw", "roofline", "matmul", "--shape", "M=4",
                                    "--target", "h100-sxm"])
    assert bad_shape.exit_code == 2 and "sizes missing" in bad_shape.output
    bad_dtype = runner.invoke(app, ["hw", "roofline", "matmul", "--shape", "M=4,N=4,K=4",
                                    "--target", "raspberry-pi-5", "--dtype", "tf32"])
    assert bad_dtype.exit_code == 2 and "no tf32 peak" in bad_dtype.output
    assert "Traceback" not in bad_dtype.output


BF16_GEMM = """op mm_bf16(A: bf16[M, K], B: bf16[K, N]) -> C: f32[M, N]:
    C[m, n] = sum[k](A[m, k] * B[k, n])
"""


def test_each_op_is_held_to_the_peak_of_the_units_it_runs_on() -> None:
    from uol_core import parse
    from uol_core.hfl.roofline import peak_key
    from uol_core.odl.cost import peak_dtype
    from uol_core.odl.ir import DType, retyped
    from uol_core.ops import load_op

    bf16_gemm = parse(BF16_GEMM)
    assert peak_dtype(bf16_gemm) == "bf16"  # a contraction of two bf16 tensors
    assert peak_dtype(load_op("matmul")) == "fp32"
    assert peak_dtype(retyped(load_op("matmul"), DType.f64)) == "fp64"
    assert peak_dtype(retyped(load_op("layernorm"), DType.bf16)) == "fp32"  # widened to f32
    assert peak_dtype(retyped(load_op("matmul"), DType.f16)) == "fp16"
    # a target with bf16 units keeps the key; one without runs the GEMM widened, at fp32
    assert peak_key(load_target("epyc-turin-9755"), "bf16") == "bf16"
    assert peak_key(toy_target(), "bf16") == "fp32"
    assert peak_key(toy_target(), "fp64") == "fp64"


def test_a_bf16_gemm_run_is_placed_under_the_bf16_roof() -> None:
    from app.services.runner import add_rates

    sizes = {"M": 512, "N": 512, "K": 512}
    turin = load_target("epyc-turin-9755")
    # 2.68e8 FLOP in 20 us: 13.4 TFLOP/s, 61% of the fp32 peak, 30% of the bf16 one
    result = add_rates({"ok": True, "sizes": sizes, "median_s": 20e-6}, BF16_GEMM,
                       "epyc-turin-9755")
    roof = result["roofline"]
    assert roof["dtype"] == "bf16" and roof["peak_gflops"] == turin.peak_gflops["bf16"]
    assert roof["fraction_of_roofline"] == pytest.approx(
        2 * 512 ** 3 / 20e-6 / 1e9 / turin.peak_gflops["bf16"])
    f32 = add_rates({"ok": True, "sizes": sizes, "median_s": 20e-6},
                    BF16_GEMM.replace("bf16", "f32"), "epyc-turin-9755")
    assert f32["roofline"]["dtype"] == "fp32"
    assert f32["roofline"]["fraction_of_roofline"] == pytest.approx(
        2 * roof["fraction_of_roofline"], rel=1e-3)


def test_the_hardware_page_compares_targets_at_a_chosen_peak() -> None:
    from app.services.hardware import roofline_for

    fig = roofline_for(["xeon-spr-8480", "epyc-turin-9755", "avx2-desktop"], "bf16")
    names = [t.name for t in fig.data]
    assert any(n.startswith("xeon-spr-8480 (bf16 114,688 GFLOP/s") for n in names)  # AMX
    assert any(n.startswith("epyc-turin-9755 (bf16 44,237 GFLOP/s") for n in names)
    assert "no bf16 peak recorded: avx2-desktop" in fig.layout.title.text
    assert roofline_for(["avx2-desktop"]).layout.title.text == "Roofline per target (fp32)"
