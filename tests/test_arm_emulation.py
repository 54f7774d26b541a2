"""ARM targets on this host: kernels cross-built with the HFL's compiler flags and verified
under qemu-user against the reference evaluator (never timed).

A sample of library ops runs on one SVE target (graviton3) and one NEON target (mobile-a78)
in the default run; `UOL_LONG=1` runs every library op on both. The cross compiler and qemu
are installed by `make install` and in CI; without them the run tests skip, saying what to
install.
"""

from __future__ import annotations

import os

import pytest
import torch
from test_scenarios import SCENARIOS, scenario_sizes  # tests/ is on sys.path (pytest prepend mode)

from uol_core.backends.base import KernelSource
from uol_core.backends.c.native import compile_c
from uol_core.hfl import load_target
from uol_core.odl.ir import DType, retyped
from uol_core.ops import list_ops, load_op
from uol_core.runtime.build import BuildError, build
from uol_core.runtime.cross import (
    EMULATED_NOTE,
    SVE_AUTOVEC_FLAGS,
    cross_meta,
    needs_cross_build,
    target_arch,
    toolchain,
)
from uol_core.runtime.emulate import EmulatedKernel
from uol_core.runtime.inputs import random_inputs
from uol_core.runtime.reference import evaluate_all
from uol_core.runtime.verify import compare

LONG = os.environ.get("UOL_LONG") == "1"
ARM_TARGETS = ("graviton3", "mobile-a78")  # SVE at 256 bits; NEON only
# One op per C template and pattern: GEMM (+ epilogue, + a transposed B: its 8 x 8 register
# transposes), rows, flash, conv, scan, stencil, generic reductions, integer labels, a scalar
# output.
SAMPLE = ("matmul", "linear_bias_gelu", "matmul_nt", "softmax", "causal_attention", "conv2d_pad1",
          "cumsum", "stencil3_pad", "layernorm", "cross_entropy", "trace")
MISSING = toolchain("aarch64").missing()
needs_tools = pytest.mark.skipif(
    bool(MISSING), reason=f"cross toolchain missing ({', '.join(MISSING)}): apt-get install "
                          "gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user")


def test_arm_targets_build_with_their_hfl_flags():
    g3, a78 = cross_meta(load_target("graviton3")), cross_meta(load_target("mobile-a78"))
    assert g3["arch"] == a78["arch"] == "aarch64"
    # length-agnostic builds: no -msve-vector-bits; the emulator runs at the HFL's length
    assert g3["flags"] == ["-mcpu=neoverse-v1", *SVE_AUTOVEC_FLAGS] and g3["sve_bits"] == 256
    assert a78["flags"] == ["-mcpu=cortex-a78"] and a78["sve_bits"] == 0
    assert target_arch(load_target("xeon-spr-8480")) == "x86_64"
    assert needs_cross_build(load_target("graviton3")) != (g3["arch"] == toolchain("aarch64").arch
                                                           and os.uname().machine == "aarch64")


# template cases at odd sizes (edges exercised), as the x86 ISA matrix uses
TEMPLATE_SIZES = {"matmul": {"M": 37, "N": 45, "K": 29}, "softmax": {"R": 7, "C": 100},
                  "attention": {"S": 37, "T": 29, "D": 24, "E": 24}, "layernorm": {"R": 5, "C": 67},
                  "conv2d": {"N": 1, "C": 3, "K": 5, "H": 9, "W": 40, "R": 3, "S": 3}}


# the templates written with platform operations (layernorm takes the generic loop nests)
NEON_TEMPLATES = {"matmul", "softmax", "attention", "conv2d"}
# length-agnostic SVE on an SVE target (the GEMM's form: c_gemm_sve)
SVE_TEMPLATES = {"matmul", "softmax", "attention", "conv2d"}


@pytest.mark.parametrize("target", ARM_TARGETS)
@pytest.mark.parametrize("name", sorted(TEMPLATE_SIZES))
def test_arm_kernels_take_the_isa_of_their_target(name, target):
    op = load_op(name)
    sizes = TEMPLATE_SIZES[name]
    from uol_core.backends import get_backend

    backend = get_backend("c")
    plan = backend.plan(op, sizes, load_target(target))
    src = backend.emit(plan, backend.choose(plan).config)
    assert "immintrin" not in src.text and "_mm256_" not in src.text and "_mm512_" not in src.text
    assert src.meta["cross"]["target"] == target
    isa = src.config.get("isa") or src.meta.get("isa")
    if name in SVE_TEMPLATES and "sve" in load_target(target).isa:
        assert isa == "sve"
        assert "#include <arm_sve.h>" in src.text and "svwhilelt_b32" in src.text
        assert "arm_neon.h" not in src.text
    elif name in NEON_TEMPLATES:
        assert isa == "neon"
        assert "#include <arm_neon.h>" in src.text and "vfmaq_f32" in src.text


def test_a_cross_build_is_never_loaded_here():
    src = KernelSource("void k(void **a, const long *s) {}", "c", "k", "noop",
                       meta={"cross": cross_meta(load_target("graviton3")), "args": []})
    with pytest.raises(BuildError, match="cannot be loaded on this host"):
        build(src)


def _verify(name: str, target: str, sizes: dict | None = None) -> None:
    op = load_op(name)
    sizes = sizes or scenario_sizes(op, "primes")
    if sizes is None:
        pytest.skip(f"{name}: no small sizes in the scenario matrix")
    kernel = compile_c(op, sizes, target)
    assert isinstance(kernel, EmulatedKernel), type(kernel)
    assert "immintrin" not in kernel.src.text, name
    inputs = random_inputs(op, sizes, seed=7)
    reference = evaluate_all(op, inputs)
    if not all(torch.isfinite(v).all() for v in reference.values() if v.is_floating_point()):
        inputs = {k: v.abs() + 0.1 if v.is_floating_point() else v for k, v in inputs.items()}
        reference = evaluate_all(op, inputs)
    verdict = compare(kernel.run(inputs), reference, kernel.src.meta.get("reduction_length", 1))
    assert verdict.ok, f"{name} on {target} {sizes}: {verdict}"


@needs_tools
@pytest.mark.parametrize("target", ARM_TARGETS)
@pytest.mark.parametrize("name", list_ops() if LONG else SAMPLE)
def test_library_op_verified_under_qemu(name, target):
    _verify(name, target)


@needs_tools
@pytest.mark.parametrize("target", ARM_TARGETS)
@pytest.mark.parametrize("name", sorted(NEON_TEMPLATES))
def test_arm_templates_verified_under_qemu(name, target):
    """The GEMM, rows, flash and conv templates at sizes where they (not the generic loop
    nests) are chosen: their NEON / SVE intrinsics run under qemu and match the reference."""
    _verify(name, target, TEMPLATE_SIZES[name])


@needs_tools
def test_an_unwritten_output_fails_verification():
    """The harness starts outputs as NaN: a kernel that writes nothing cannot pass."""
    op = load_op("add")
    sizes = {"M": 3, "N": 5}
    out = op.outputs[0].name
    src = KernelSource("#include <stdint.h>\nvoid uol_add(void **a, const int64_t *s) {}\n", "c",
                       "uol_add", "add", meta={"cross": cross_meta(load_target("mobile-a78")),
                                               "args": ["A", "B", out], "outputs": [out]})
    inputs = random_inputs(op, sizes)
    outputs = EmulatedKernel(src, op, sizes).run(inputs)
    assert torch.isnan(outputs[out]).all()
    assert not compare(outputs, evaluate_all(op, inputs), 1).ok


@needs_tools
def test_uol_run_on_an_arm_target_verifies_under_emulation():
    import json

    from typer.testing import CliRunner

    from uol_cli.main import app

    result = CliRunner().invoke(app, ["run", "softmax", "--target", "graviton3", "--shape",
                                      "R=9,C=37", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] and report["reason"] == EMULATED_NOTE and report["ms"] is None
    assert report["predicted"]["label"].startswith("model-predicted")
    assert report["predicted"]["ms"] > 0
    assert report["isa"] == "sve"  # graviton3's HFL record has SVE: the report names it


@needs_tools
def test_neon_vexp_matches_exp_under_qemu(tmp_path):
    """The NEON uol_vexp (the platform file's) against libm's exp over the whole clamped range,
    and against the scalar uol_expf whose steps it repeats."""
    import subprocess

    from uol_core.backends.c.platforms import platform
    from uol_core.backends.c.text.vmath import SCALAR_MATH
    from uol_core.runtime.cross import emulator_argv

    program = ("#include <stdint.h>\n#include <stdio.h>\n#include <math.h>\n" + SCALAR_MATH
               + "#include <arm_neon.h>\n" + platform("neon").vector_math(4) + r"""
int main(void)
{
    double worst = 0.0, worst_scalar = 0.0;
    for (float x = -87.0f; x < 87.98f; x += 0.013f) {  /* every lane inside the clamps */
        float lanes[4] = {x, x + 0.003f, x + 0.007f, x + 0.011f}, got[4];
        vst1q_f32(got, uol_vexp(vld1q_f32(lanes)));
        for (int k = 0; k < 4; ++k) {
            const double want = exp((double)lanes[k]);
            const double rel = fabs(got[k] - want) / want;
            const double vs_scalar = fabs(got[k] - uol_expf(lanes[k])) / want;
            worst = rel > worst ? rel : worst;
            worst_scalar = vs_scalar > worst_scalar ? vs_scalar : worst_scalar;
        }
    }
    printf("%.3e %.3e\n", worst, worst_scalar);
    return 0;
}
""")
    tools = toolchain("aarch64")
    (tmp_path / "vexp.c").write_text(program)
    exe = tmp_path / "vexp"
    built = subprocess.run([tools.compiler, "-O2", "-mcpu=cortex-a78", str(tmp_path / "vexp.c"),
                            "-o", str(exe), "-lm"], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-2000:]
    cross = cross_meta(load_target("mobile-a78"))
    ran = subprocess.run([*emulator_argv(cross), str(exe)], capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    worst, worst_scalar = (float(v) for v in ran.stdout.split())
    # uol_expf's documented error is ~1e-7; the two may round n differently at exact ties
    assert worst < 2e-7, f"NEON uol_vexp relative error {worst:.3e} against exp"
    assert worst_scalar < 2e-7, f"NEON uol_vexp differs from uol_expf by {worst_scalar:.3e}"


# The scenario matrix (tests/test_scenarios.py: every library op x shape class x dtype) on one
# NEON and one SVE target. `make test-arm` (UOL_LONG=1) runs all of it; the default run takes a
# fixed sample spread over the matrix (every dtype and shape class appear in the whole).
C_SCENARIOS = [p.values[:3] for p in SCENARIOS if p.values[3] == "c"]
# one scenario of each dtype, from the middle of its share of the matrix
SCENARIO_SAMPLE = [cases[len(cases) // 2] for cases in (
    [c for c in C_SCENARIOS if c[2] == dtype] for dtype in ("f32", "f64", "f16", "bf16"))]


@needs_tools
@pytest.mark.parametrize("target", ARM_TARGETS)
@pytest.mark.parametrize(("name", "shape", "dtype"),
                         [pytest.param(*case, id="-".join(case))
                          for case in (C_SCENARIOS if LONG else SCENARIO_SAMPLE)])
def test_scenario_verified_under_qemu(name, shape, dtype, target):
    op = load_op(name)
    if dtype != "f32":
        op = retyped(op, DType(dtype))
    sizes = scenario_sizes(op, shape)
    inputs = random_inputs(op, sizes, seed=7)
    if dtype == "f64":
        inputs = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    reference = evaluate_all(op, inputs)
    if not all(torch.isfinite(v).all() for v in reference.values() if v.is_floating_point()):
        inputs = {k: v.abs() + 0.1 if v.is_floating_point() else v for k, v in inputs.items()}
        reference = evaluate_all(op, inputs)
    kernel = compile_c(op, sizes, target)
    assert isinstance(kernel, EmulatedKernel), type(kernel)
    verdict = compare(kernel.run(inputs), reference, kernel.src.meta["reduction_length"])
    assert verdict.ok, f"{name} {shape} {dtype} on {target} {sizes}: {verdict}"


def test_the_scenario_sample_spans_the_matrix():
    assert len(C_SCENARIOS) >= 200
    assert len({dtype for _, _, dtype in SCENARIO_SAMPLE}) == len(SCENARIO_SAMPLE) == 4
