"""Every C template on every ISA the C backend has a platform file for, on any host.

For each (template, ISA): the emitted text matches its golden file (update with
`pytest tests/test_c_isa_matrix.py --update-golden` and review the diff); it compiles with that
ISA's flags on a baseline x86-64 -march (so the flags the build adds are all it needs, whatever
the host); and where the host has the ISA, the kernel runs and matches the reference evaluator.
Elsewhere the run skips and says which flag the host lacks. NEON kernels are built with the
AArch64 cross compiler and run under qemu-user (verification only) on a host of another
architecture.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

from uol_core.acg.fixtures import fixed_target, host_isa_flags
from uol_core.api import choose_config
from uol_core.api import compile as uol_compile
from uol_core.backends.c import emit
from uol_core.odl.grad import derive_grad
from uol_core.odl.shapes import shape_of
from uol_core.ops import load_op
from uol_core.runtime.build import flags_for
from uol_core.runtime.cross import for_target, host_arch, toolchain
from uol_core.runtime.emulate import EmulatedKernel
from uol_core.runtime.reference import evaluate_all

TARGETS = {
    "avx2": fixed_target(),
    "avx512": fixed_target("test-avx512", isa=("avx512f", "avx512bw", "avx512vl", "avx2", "fma"),
                           vector_bits=512, registers=32),
    "neon": fixed_target("test-neon", isa=("neon", "asimdhp", "asimddp"), vector_bits=128,
                         registers=32),
    # an x86-64 CPU below AVX2: the portable path (gcc vector extensions)
    "vecext": fixed_target("test-portable", isa=("sse2",), vector_bits=128, registers=16),
}
# The host flags each ISA's kernels need to run (NEON: on an AArch64 host, or under qemu).
NEEDS = {"avx2": {"avx2", "fma"}, "avx512": {"avx512f", "avx2", "fma"}, "neon": set(),
         "vecext": set()}
# What each ISA's intrinsic templates must spell.
INTRINSIC_MARK = {"avx512": "_mm512", "avx2": "_mm256", "neon": "vfmaq_f32"}
ARM_TOOLS_MISSING = toolchain("aarch64").missing() if host_arch() != "aarch64" else []
# A baseline -march per ISA: no host CPU model, so only the build's ISA flags enable intrinsics.
BASELINE_MARCH = "-march=x86-64"


ATTENTION_GRAD = derive_grad(load_op("attention"), recompute_wide=True)


# template -> (op factory, sizes: odd, not multiples of any vector width, so edges are exercised)
CASES = {
    "gemm": (lambda: load_op("matmul"), {"M": 37, "N": 45, "K": 29}),
    "gemm_epilogue": (lambda: load_op("linear_bias_gelu"), {"M": 19, "N": 33, "K": 21}),
    "rows": (lambda: load_op("softmax"), {"R": 7, "C": 100}),
    "flash": (lambda: load_op("attention_batched"),
              {"B": 1, "NH": 2, "S": 37, "T": 29, "D": 24}),
    "flash_causal": (lambda: load_op("causal_attention"), {"S": 37, "D": 8}),
    "flash_backward": (lambda: ATTENTION_GRAD.op, None),
    "conv": (lambda: load_op("conv2d_pad1"), {"N": 1, "C": 3, "K": 5, "H": 9, "W": 40}),
    # 7 output rows of 24: every ISA's window slides down whole rows, its last tile past them
    "depthwise": (lambda: load_op("depthwise_conv2d"), {"N": 1, "C": 3, "H": 13, "W": 30,
                                                        "R": 7, "S": 7}),
    "scan": (lambda: load_op("cumsum"), None),
    "stencil": (lambda: load_op("stencil3_pad"), None),
    "generic": (lambda: load_op("layernorm"), {"R": 5, "C": 67}),
}
# Templates written with intrinsics: their AVX-512 and AVX2 text must use them.
INTRINSIC_TEMPLATES = {"gemm", "gemm_epilogue", "rows", "flash", "flash_causal", "conv",
                      "depthwise"}
MATRIX = [(case, isa) for case in sorted(CASES) for isa in sorted(TARGETS)]


def _case(case: str):
    factory, sizes = CASES[case]
    op = factory()
    return op, dict(sizes or {d: 13 for d in op.dims})


def _source(case: str, isa: str):
    op, sizes = _case(case)
    target = TARGETS[isa]
    cfg, _, _ = choose_config(op, sizes, target, None)
    return emit(op, cfg, target, sizes)


@pytest.mark.parametrize(("case", "isa"), MATRIX)
def test_emitted_c_matches_golden(case, isa, golden):
    src = _source(case, isa)
    if case in INTRINSIC_TEMPLATES and isa != "vecext":
        assert INTRINSIC_MARK[isa] in src.text
    if isa in ("vecext", "neon"):
        assert "_mm256" not in src.text and "_mm512" not in src.text
    if isa != "neon":
        assert "arm_neon.h" not in src.text
    golden(f"c/isa/{case}_{isa}.c", src.text)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
@pytest.mark.parametrize(("case", "isa"), MATRIX)
def test_compiles_with_the_isa_flags_on_any_host(case, isa, tmp_path):
    src = _source(case, isa)
    compiler, march = "gcc", [BASELINE_MARCH]
    if isa == "neon":  # the AArch64 build: the cross compiler's baseline Armv8-A, no -mcpu
        if ARM_TOOLS_MISSING:
            pytest.skip(f"cross toolchain missing ({', '.join(ARM_TOOLS_MISSING)}): apt-get "
                        "install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user")
        src = for_target(src, TARGETS[isa])
        compiler = toolchain("aarch64").compiler if "cross" in src.meta else "gcc"
        march = ["-march=armv8-a"]
    flags = [f for f in flags_for(src) if not f.startswith("-march=") and f != "-shared"]
    c_file = tmp_path / "kernel.c"
    c_file.write_text(src.text)
    done = subprocess.run([compiler, *march, *flags, "-c", str(c_file), "-o",
                           str(tmp_path / "kernel.o")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize(("case", "isa"), MATRIX)
def test_runs_and_verifies_where_the_host_has_the_isa(case, isa):
    missing = NEEDS[isa] - host_isa_flags()
    if isa == "neon" and ARM_TOOLS_MISSING:
        pytest.skip(f"cross toolchain missing ({', '.join(ARM_TOOLS_MISSING)}): apt-get "
                    "install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user")
    if missing:
        pytest.skip(f"this host lacks {', '.join(sorted(missing))}: {isa} kernels are compiled "
                    "and golden-tested here, run where the CPU has them")
    op, sizes = _case(case)
    torch.manual_seed(0)
    inputs = {d.name: torch.randn(*shape_of(op, d.name, sizes)) for d in op.inputs}
    if case == "flash_backward":  # the saved row statistics come from the forward, not noise
        forward = ATTENTION_GRAD.forward_with_saves
        saved = evaluate_all(forward, {d.name: inputs[d.name] for d in forward.inputs})
        kept = (*ATTENTION_GRAD.saved, *ATTENTION_GRAD.saved_extra)  # O, mx, l
        inputs.update({name: saved[name] for name in kept})
    compiled = uol_compile(op, target=TARGETS[isa])
    got = compiled(**inputs)
    if isa == "neon":  # verified under qemu unless this host is AArch64
        assert isinstance(compiled.kernel, EmulatedKernel) == (host_arch() != "aarch64")
    want = evaluate_all(op, inputs)
    got = got if isinstance(got, dict) else {op.outputs[0].name: got}
    for name, tensor in got.items():
        torch.testing.assert_close(tensor, want[name], rtol=2e-4, atol=2e-4)
