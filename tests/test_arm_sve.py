"""SVE: the length-agnostic platform file (uol_core/backends/c/platforms/sve.py) on the HFL's SVE targets.

Every C template's text for an SVE target matches its golden file (tests/golden/c/isa/*_sve.c;
the GEMM, rows, flash attention, convolution and the loop nests spell SVE, counting vectors);
the same binaries run under qemu-user at several SVE vector lengths and match the reference each
time, which is what length-agnostic means. The HFL decides the ISA: targets whose record lists
SVE take it, the others keep NEON. UOL_LONG=1 adds 1024- and 2048-bit runs.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace

import pytest
import torch
from test_c_isa_matrix import ATTENTION_GRAD, CASES  # tests/ is on sys.path (pytest prepend mode)

from uol_core.acg.config import TileConfig, lanes, target_isas
from uol_core.acg.fixtures import fixed_target
from uol_core.api import choose_config
from uol_core.backends import get_backend
from uol_core.backends.c import emit
from uol_core.backends.c.gemm.cost_model import CostModel
from uol_core.backends.c.native import compile_c
from uol_core.backends.c.route import emit_any
from uol_core.hfl import list_targets, load_target
from uol_core.odl.grad import derive_grad
from uol_core.odl.shapes import shape_of
from uol_core.ops import load_op
from uol_core.runtime.cross import cross_meta, emulator_argv, target_arch, toolchain
from uol_core.runtime.emulate import EmulatedKernel
from uol_core.runtime.inputs import random_inputs
from uol_core.runtime.reference import evaluate_all

# Goldens do not follow HFL record edits: a fixed target with a 256-bit SVE and the generic
# Armv8.2-A + SVE flags (no CPU model).
SVE_TARGET = replace(fixed_target("test-sve", isa=("sve", "neon", "asimdhp"), vector_bits=256,
                                  registers=32), compiler_flags=["-march=armv8.2-a+sve"])
# bits: the architectural minimum, Neoverse V1's, and wider (UOL_LONG: up to the maximum)
VECTOR_LENGTHS = (128, 256, 512) + ((1024, 2048) if os.environ.get("UOL_LONG") else ())
# templates whose binaries run at every length here
RUN_CASES = ("rows", "generic", "gemm", "gemm_epilogue", "flash", "flash_causal", "flash_backward",
             "conv", "scan")
# templates written in SVE's length-agnostic form (no NEON in their text)
SVE_TEMPLATES = {"gemm", "gemm_epilogue", "rows", "flash", "flash_causal", "flash_backward", "conv"}
MISSING = toolchain("aarch64").missing()
needs_tools = pytest.mark.skipif(
    bool(MISSING), reason=f"cross toolchain missing ({', '.join(MISSING)}): apt-get install "
                          "gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user")


def _case(case: str):
    factory, sizes = CASES[case]
    op = factory()
    return op, dict(sizes or {d: 13 for d in op.dims})


def _gemm_template(op, sizes, target, config=None):
    """The GEMM template at the model's config (overrides on top), as `uol run` builds it;
    emit_any would give a lone matmul the generic loop nest."""
    cfg, _, _ = choose_config(op, sizes, target, config or None)
    return emit(op, cfg, target, sizes)


def _emitter(case: str):
    return _gemm_template if case.startswith("gemm") else emit_any


@pytest.mark.parametrize("case", sorted(CASES))
def test_sve_text_matches_golden(case, golden):
    op, sizes = _case(case)
    src = _emitter(case)(op, sizes, SVE_TARGET, None)
    assert "immintrin" not in src.text
    if case in SVE_TEMPLATES:
        assert (src.config if case.startswith("gemm") else src.meta)["isa"] == "sve"
        assert "#include <arm_sve.h>" in src.text and "svwhilelt_b32" in src.text
        assert "svcntw()" in src.text and "arm_neon.h" not in src.text
    if case.startswith("flash"):  # dot products along the head dimension, the vector exp
        assert "svaddv_f32" in src.text and "svmaxv_f32" in src.text and "uol_vexp(" in src.text
    golden(f"c/isa/{case}_sve.c", src.text)


def test_arm_targets_choose_sve_where_their_record_has_it():
    arm = [load_target(n) for n in list_targets() if load_target(n).kind == "cpu"
           and target_arch(load_target(n)) == "aarch64"]
    assert {t.name for t in arm} >= {"graviton3", "grace-neoverse-v2", "mobile-a78", "raspberry-pi-5"}
    for target in arm:
        has_sve = "sve" in target.isa
        assert target_isas(target, vla=True)[0] == ("sve" if has_sve else "neon"), target.name
        # the fixed-width ISA of every ARM target: what the GEMM's direct path and a user's
        # isa=neon override take
        assert target_isas(target)[0] == "neon", target.name
        for name, sizes in (("matmul", {"M": 5, "N": 20, "K": 7}), ("softmax", {"R": 3, "C": 40}),
                            ("attention", {"S": 9, "T": 11, "D": 8, "E": 6}),
                            ("conv2d_pad1", {"N": 1, "C": 2, "K": 3, "H": 6, "W": 7})):
            if name == "matmul":  # the GEMM template's config
                isa = _gemm_template(load_op(name), sizes, target).config["isa"]
            else:
                isa = emit_any(load_op(name), sizes, target, None).meta["isa"]
            assert isa == ("sve" if has_sve else "neon"), (target.name, name)
        if has_sve:  # the lanes the template states are those the HFL gives the cores
            assert lanes("sve", target) == target.vector_bits // 32


def _run_at(kernel: EmulatedKernel, bits: int, inputs: dict) -> dict:
    """The kernel's one binary, run by qemu at an SVE vector length of `bits`."""
    kernel.cross = {**kernel.cross, "sve_bits": bits}
    return kernel.run(inputs)


@needs_tools
@pytest.mark.parametrize("case", RUN_CASES)
def test_one_binary_is_right_at_every_vector_length(case):
    op, sizes = _case(case)
    kernel = compile_c(op, sizes, SVE_TARGET, emitter=_emitter(case))
    assert isinstance(kernel, EmulatedKernel)
    assert not any(f.startswith("-msve-vector-bits") for f in kernel.cross["flags"])
    torch.manual_seed(0)
    inputs = {d.name: torch.randn(*shape_of(op, d.name, sizes)) for d in op.inputs}
    if case == "flash_backward":  # the saved row statistics come from the forward, not noise
        forward = ATTENTION_GRAD.forward_with_saves
        saved = evaluate_all(forward, {d.name: inputs[d.name] for d in forward.inputs})
        kept = (*ATTENTION_GRAD.saved, *ATTENTION_GRAD.saved_extra)  # O, mx, l
        inputs.update({name: saved[name] for name in kept})
    want = evaluate_all(op, inputs)
    for bits in VECTOR_LENGTHS:
        got = _run_at(kernel, bits, inputs)
        for name, tensor in got.items():
            torch.testing.assert_close(tensor, want[name], rtol=2e-4, atol=2e-4,
                                       msg=lambda m, b=bits: f"{case} at SVE {b} bits: {m}")


@needs_tools
def test_sve_vexp_matches_exp_at_two_lengths(tmp_path):
    """The SVE uol_vexp against libm's exp over the clamped range, one binary at 128 and 256
    bits, and against the scalar uol_expf whose steps it repeats."""
    from uol_core.backends.c.platforms import platform
    from uol_core.backends.c.text.vmath import SCALAR_MATH

    program = ("#include <stdint.h>\n#include <stdio.h>\n#include <math.h>\n" + SCALAR_MATH
               + "#include <arm_sve.h>\n" + platform("sve").vector_math(0) + r"""
int main(void)
{
    double worst = 0.0, worst_scalar = 0.0;
    float lanes[64], got[64];
    const int64_t n = (int64_t)svcntw();
    for (float x = -87.0f; x < 87.98f; x += 0.029f) {
        for (int64_t k = 0; k < n; ++k) lanes[k] = x + 0.0005f * (float)k;
        const svbool_t all = svptrue_b32();
        svst1_f32(all, got, uol_vexp(svld1_f32(all, lanes)));
        for (int64_t k = 0; k < n; ++k) {
            if (lanes[k] > 88.0f) continue;
            const double want = exp((double)lanes[k]);
            const double rel = fabs(got[k] - want) / want;
            const double vs_scalar = fabs(got[k] - uol_expf(lanes[k])) / want;
            worst = rel > worst ? rel : worst;
            worst_scalar = vs_scalar > worst_scalar ? vs_scalar : worst_scalar;
        }
    }
    printf("%lld %.3e %.3e\n", (long long)n, worst, worst_scalar);
    return 0;
}
""")
    tools = toolchain("aarch64")
    (tmp_path / "vexp.c").write_text(program)
    exe = tmp_path / "vexp"
    built = subprocess.run([tools.compiler, "-O2", "-march=armv8.2-a+sve", str(tmp_path / "vexp.c"),
                            "-o", str(exe), "-lm"], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-2000:]
    for bits in (128, 256):
        cross = {**cross_meta(SVE_TARGET), "sve_bits": bits}
        ran = subprocess.run([*emulator_argv(cross), str(exe)], capture_output=True, text=True,
                             timeout=120)
        assert ran.returncode == 0, ran.stderr[-2000:]
        n, worst, worst_scalar = ran.stdout.split()
        assert int(n) == bits // 32  # the binary really ran at that length
        # uol_expf's documented error is ~1e-7; the two may round n differently at exact ties
        assert float(worst) < 2e-7, f"SVE uol_vexp relative error {worst} at {bits} bits"
        assert float(worst_scalar) < 2e-7, f"SVE uol_vexp differs from uol_expf by {worst_scalar}"


def test_neon_gemm_predictions_count_the_lanes_it_is_emitted_with():
    """The model's vector-width factor compares a GEMM's ISA with the widest explicit ISA the
    target has: on graviton3 NEON is that ISA (four 128-bit FMA pipes reach the HFL peak), not
    the portable path at the SVE width; on an AVX-512 part AVX2 still gets half."""
    backend = get_backend("c")
    op, sizes = load_op("matmul"), {"M": 256, "N": 256, "K": 256}

    def width(target_name: str, isa: str) -> float:
        target = load_target(target_name)
        cfg = TileConfig(isa=isa, mr=6, nr=2 * lanes(isa, target), threads=target.cores)
        plan = backend.plan(op, sizes, target)
        return CostModel(plan.detail, target).estimate(cfg).terms["vector_width"]

    assert width("graviton3", "neon") == 1.0
    assert width("mobile-a78", "neon") == 1.0
    assert width("xeon-spr-8480", "avx2") == 0.5
    assert width("xeon-spr-8480", "avx512") == 1.0


@needs_tools
@pytest.mark.parametrize(("name", "config"), [("log_softmax", {"stream": 1}),
                                              ("softmax_temperature", {})])
def test_row_variants_are_right_at_two_lengths(name, config):
    """The rows template's other forms on SVE: log-softmax with non-temporal stores (STNT1W
    under the tail predicate) and a scaled softmax."""
    op = load_op(name)
    sizes = {d: 6 if i == 0 else 77 for i, d in enumerate(op.dims)}
    kernel = compile_c(op, sizes, SVE_TARGET, config)
    assert kernel.src.meta["isa"] == "sve"
    assert ("svstnt1_f32" in kernel.src.text) == bool(config.get("stream"))
    inputs = random_inputs(op, sizes, seed=1)
    if "T" in inputs:  # a temperature, positive
        inputs["T"] = torch.tensor(0.7)
    want = evaluate_all(op, inputs)
    for bits in (128, 256):
        for tensor_name, tensor in _run_at(kernel, bits, inputs).items():
            torch.testing.assert_close(tensor, want[tensor_name], rtol=2e-4, atol=2e-4)


@needs_tools
def test_causal_flash_with_saves_and_its_backward_over_several_blocks():
    """Training's causal forward (O and the saved mx, l, z) and its flash backward with more
    queries and keys than one block (S = 70: two query blocks, two key blocks of the backward,
    a row tail in every register tile), 2 threads, at the shortest and a long vector length."""
    grad = derive_grad(load_op("causal_attention"), recompute_wide=True)
    sizes = {"S": 70, "D": 10}
    forward_inputs = random_inputs(grad.forward_with_saves, sizes, seed=3)
    saved = evaluate_all(grad.forward_with_saves, forward_inputs)
    backward_inputs = random_inputs(grad.op, sizes, seed=4)  # dO; Q, K, V as in the forward
    backward_inputs.update({name: forward_inputs[name] for name in forward_inputs})
    backward_inputs.update({name: saved[name] for name in (*grad.saved, *grad.saved_extra)})
    for op, inputs in ((grad.forward_with_saves, forward_inputs), (grad.op, backward_inputs)):
        kernel = compile_c(op, sizes, SVE_TARGET)
        assert kernel.src.meta["isa"] == "sve", op.name
        want = evaluate_all(op, inputs)
        for bits in (128, 512):
            for name, tensor in _run_at(kernel, bits, inputs).items():
                torch.testing.assert_close(tensor, want[name], rtol=2e-4, atol=2e-4,
                                           msg=lambda m, b=bits, n=name: f"{n} at {b} bits: {m}")


@needs_tools
@pytest.mark.parametrize(("name", "sizes"), [
    # a fused bias + relu (the tile epilogue), two row blocks and a short last one
    ("conv2d_bias_relu", {"N": 2, "C": 3, "K": 7, "H": 11, "W": 19, "R": 3, "S": 3}),
    # a plain sum stored from the registers: outputs narrower than one vector, a 2 x 3 window
    ("conv2d", {"N": 2, "C": 4, "K": 9, "H": 10, "W": 5, "R": 2, "S": 3}),
])
def test_conv_forms_are_right_at_two_lengths(name, sizes):
    op = load_op(name)
    kernel = compile_c(op, sizes, SVE_TARGET)
    assert kernel.src.meta["isa"] == "sve"
    assert ("stored from the registers" in kernel.src.meta["fusion"]) == (name == "conv2d")
    inputs = random_inputs(op, sizes, seed=5)
    want = evaluate_all(op, inputs)
    for bits in (128, 512):
        for tensor_name, tensor in _run_at(kernel, bits, inputs).items():
            torch.testing.assert_close(tensor, want[tensor_name], rtol=2e-4, atol=2e-4)


@needs_tools
@pytest.mark.parametrize(("name", "config"), [
    # several k blocks (partial sums kept in C), 2 threads over column panels, a short last panel
    ("matmul", {"mr": 4, "nr": 16, "kc": 8, "mc": 8, "nc": 32, "threads": 2}),
    # B read transposed (strided columns: the scalar packing), 2 threads over row panels
    ("matmul_nt", {"mr": 3, "nr": 24, "kc": 16, "mc": 9, "nc": 48, "par": "ir",
                    "threads": 2}),
    # the fused bias + GELU epilogue on the last k block
    ("linear_bias_gelu", {"mr": 5, "nr": 8, "kc": 16, "mc": 10, "nc": 40}),
])
def test_length_agnostic_gemm_is_right_at_three_lengths(name, config):
    """The SVE GEMM (c_gemm_sve): NR = NV * svcntw() columns at run time, so at 128 bits a
    config tuned for 256 has half-width panels and at 512 double, and every size here leaves
    a short edge in M, N and K."""
    op = load_op(name)
    sizes = {d: {"M": 37, "N": 53, "K": 29}.get(d, 37) for d in op.dims}
    kernel = compile_c(op, sizes, SVE_TARGET, config, emitter=_gemm_template)
    assert kernel.src.config["isa"] == "sve" and "svwhilelt_b32" in kernel.src.text
    inputs = random_inputs(op, sizes, seed=7)
    want = evaluate_all(op, inputs)
    for bits in (128, 256, 512):
        for tensor_name, tensor in _run_at(kernel, bits, inputs).items():
            torch.testing.assert_close(tensor, want[tensor_name], rtol=2e-4, atol=2e-4,
                                       msg=lambda m, b=bits: f"{name} at {b} bits: {m}")


def test_sve_gemm_refuses_the_direct_path_and_keeps_neon_as_an_override():
    op, sizes = load_op("matmul"), {"M": 9, "N": 20, "K": 7}
    with pytest.raises(ValueError, match="path=direct has no sve form"):
        _gemm_template(op, sizes, SVE_TARGET, {"path": "direct"})
    neon = _gemm_template(op, sizes, SVE_TARGET, {"isa": "neon", "nr": 8})
    assert "arm_neon.h" in neon.text and "arm_sve.h" not in neon.text
