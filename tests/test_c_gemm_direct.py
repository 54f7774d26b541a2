"""The direct GEMM path (backends/c/gemm/direct.py) for small and skinny shapes: emitted text of
every split on every ISA the GEMM supports (golden, any host; update with `pytest
tests/test_c_gemm_direct.py --update-golden` and review the diff), a build with that ISA's flags
on a baseline -march, results against the reference evaluator where the host runs the ISA (NEON
under qemu), and the constraint space and cost model that choose it."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

from uol_core.acg.config import TileConfig, lanes, parse_config
from uol_core.acg.fixtures import fixed_target, host_isa_flags
from uol_core.api import compile as uol_compile
from uol_core.backends.c import emit
from uol_core.backends.c.gemm.cost_model import CostModel
from uol_core.backends.c.gemm.explain import explain
from uol_core.backends.c.gemm.space import DIRECT_MAX_EXTENT, build_space
from uol_core.ops import load_op
from uol_core.plans.gemm import lower_contraction
from uol_core.runtime.build import flags_for
from uol_core.runtime.cross import for_target, host_arch, toolchain
from uol_core.runtime.reference import evaluate_all

TARGETS = {
    "avx2": fixed_target(),
    "avx512": fixed_target("test-avx512", isa=("avx512f", "avx512bw", "avx512vl", "avx2", "fma"),
                           vector_bits=512, registers=32),
    "neon": fixed_target("test-neon", isa=("neon", "asimdhp", "asimddp"), vector_bits=128,
                         registers=32),
    "vecext": fixed_target("test-portable", isa=("sse2",), vector_bits=128, registers=16),
}
NEEDS = {"avx2": {"avx2", "fma"}, "avx512": {"avx512f", "avx2", "fma"}, "neon": set(),
         "vecext": set()}
ARM_TOOLS_MISSING = toolchain("aarch64").missing() if host_arch() != "aarch64" else []
# case -> (op, sizes with edges in every dimension, the knobs besides isa and nr)
CASES = {
    # M <= MR: B streamed with prefetch; N = 70 leaves an edge panel that is packed
    "stream": ("matmul", {"M": 5, "N": 70, "K": 300},
               dict(mr=8, kc=128, mc=5, ku=4, pf=8, par="jr", threads=2)),
    # depth split with a fused epilogue after the reduction; M > MR: B panels packed
    "ksplit": ("linear_bias_gelu", {"M": 19, "N": 33, "K": 200},
               dict(mr=4, kc=64, mc=19, ku=4, pf=0, par="k", threads=2)),
    "batch": ("bmm", {"B": 3, "M": 9, "N": 17, "K": 20},
              dict(mr=4, kc=64, mc=9, ku=1, pf=0, par="batch", threads=2)),
    # B read through a transposed view (unit stride along k, not n): every panel is packed
    "strided_b": ("matmul_nt", {"M": 6, "N": 20, "K": 37},
                  dict(mr=6, kc=64, mc=6, ku=1, pf=0, par="jr", threads=1)),
}
MATRIX = [(case, isa) for case in sorted(CASES) for isa in sorted(TARGETS)]


def _config(case: str, isa: str) -> TileConfig:
    knobs = CASES[case][2]
    return TileConfig(isa=isa, nr=2 * lanes(isa, TARGETS[isa]), nc=64, path="direct", **knobs)


def _source(case: str, isa: str):
    name, sizes, _ = CASES[case]
    return emit(load_op(name), _config(case, isa), TARGETS[isa], sizes)


@pytest.mark.parametrize(("case", "isa"), MATRIX)
def test_direct_gemm_matches_golden(case, isa, golden):
    src = _source(case, isa)
    assert "uol_micro_direct" in src.text and "uol_pack_a" not in src.text
    if isa in ("vecext", "neon"):
        assert "_mm256" not in src.text and "_mm512" not in src.text
    golden(f"c/gemm_direct/{case}_{isa}.c", src.text)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_direct_gemm_compiles_with_the_isa_flags_on_any_host(isa, tmp_path):
    src = _source("ksplit", isa)
    compiler, march = "gcc", ["-march=x86-64"]
    if isa == "neon":
        if ARM_TOOLS_MISSING:
            pytest.skip(f"cross toolchain missing ({', '.join(ARM_TOOLS_MISSING)}): apt-get "
                        "install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user")
        src = for_target(src, TARGETS[isa])
        compiler = toolchain("aarch64").compiler if "cross" in src.meta else "gcc"
        march = ["-march=armv8-a"]
    flags = [f for f in flags_for(src) if not f.startswith("-march=") and f != "-shared"]
    c_file = tmp_path / "kernel.c"
    c_file.write_text(src.text)
    done = subprocess.run([compiler, *march, *flags, "-Werror=implicit-function-declaration",
                           "-c", str(c_file), "-o", str(tmp_path / "kernel.o")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize(("case", "isa"), MATRIX)
def test_direct_gemm_runs_and_verifies_where_the_host_has_the_isa(case, isa):
    missing = NEEDS[isa] - host_isa_flags()
    if isa == "neon" and ARM_TOOLS_MISSING:
        pytest.skip(f"cross toolchain missing ({', '.join(ARM_TOOLS_MISSING)}): apt-get "
                    "install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user")
    if missing:
        pytest.skip(f"this host lacks {', '.join(sorted(missing))}: {isa} kernels are compiled "
                    "and golden-tested here, run where the CPU has them")
    name, sizes, _ = CASES[case]
    op = load_op(name)
    torch.manual_seed(0)
    inputs = {d.name: torch.randn(*[f.evaluate(sizes) for f in d.shape]) for d in op.inputs}
    kernel = uol_compile(op, shapes=sizes, target=TARGETS[isa], config=_config(case, isa).key())
    assert kernel.config["path"] == "direct"
    want = evaluate_all(op, inputs)[op.outputs[0].name]
    torch.testing.assert_close(kernel(**inputs), want, rtol=2e-4, atol=2e-4)


SKINNY = [("matmul", {"M": 64, "N": 1024, "K": 256}), ("matmul", {"M": 8, "N": 4096, "K": 4096}),
          ("matmul", {"M": 128, "N": 128, "K": 8192}), ("bmm", {"B": 32, "M": 64, "N": 64, "K": 64})]


def _ranked(name: str, sizes: dict, target=TARGETS["avx512"]):
    plan = lower_contraction(load_op(name), sizes)
    space = build_space(plan, target)
    model = CostModel(plan, target)
    return space, model, model.rank(space.configs)


@pytest.mark.parametrize(("name", "sizes"), SKINNY)
def test_the_model_chooses_the_direct_path_for_small_and_skinny_shapes(name, sizes):
    space, model, ranked = _ranked(name, sizes)
    best = ranked[0][0]
    assert best.path == "direct" and best.mc == sizes["M"] and best.mr <= 8
    if sizes["M"] <= best.mr:  # a streamed B panel is prefetched
        assert best.pf > 0
    text = explain(space, model, best).render()
    assert "path direct" in text and "direct path:" in text


def test_large_shapes_keep_the_packed_path_and_say_why():
    space, model, ranked = _ranked("matmul", {"M": 1024, "N": 1024, "K": 1024})
    assert space.domains["path"] == ["packed"] and "k" not in space.domains["par"]
    text = explain(space, model, ranked[0][0]).render()
    assert f"min(M, N) <= {DIRECT_MAX_EXTENT}" in text


def test_direct_path_rules_are_named_and_bind():
    space, _, _ = _ranked("matmul", {"M": 128, "N": 128, "K": 8192})
    rules = {c.name: c for c in space.constraints}
    assert rules["direct path"].removed > 0 and "mc == 128" in rules["direct path"].formula
    # a depth split keeps one M x N partial sum per thread: its size against L2 is in the rule
    assert f"{128 * 128 * 4} <= {TARGETS['avx512'].l2_bytes}" in rules["parallel split"].formula
    splits = {c.par for c in space.configs if c.path == "direct"}
    assert splits == {"jr", "ir", "k"}  # no batch to split
    assert all(c.mc == 128 for c in space.configs if c.path == "direct")


def test_one_column_panel_is_split_by_rows_not_by_depth():
    """N = 10 is one B panel: a column split has nothing to share, and a depth split pays a
    reduction and a second barrier (its 10 us cost 2x the row split here at 128x256x10); the
    row split packs the one panel in each thread, which the model charges."""
    _, model, ranked = _ranked("matmul", {"M": 128, "N": 10, "K": 256})
    best = ranked[0][0]
    assert (best.path, best.par, best.threads) == ("direct", "ir", 2)
    shared = model.estimate(best.replace(par="jr")).terms["memory_s"]
    assert model.estimate(best).terms["memory_s"] > shared  # each thread packs the panel
    depth = [g for c, g in ranked if c.par == "k"]
    assert depth and max(depth) < ranked[0][1]


def test_a_row_split_direct_kernel_matches_torch():
    from uol_core.api import compile as compile_op

    a, b = torch.randn(128, 256), torch.randn(256, 10)
    kernel = compile_op("matmul", shapes={"A": (128, 256), "B": (256, 10)},
                        config="path=direct,par=ir,threads=2,mc=128")
    torch.testing.assert_close(kernel(A=a, B=b), a @ b, rtol=1e-4, atol=1e-4)


def test_a_depth_split_needs_the_direct_path():
    with pytest.raises(ValueError, match="par=k"):
        parse_config("par=k,path=packed", TileConfig())
    with pytest.raises(ValueError, match="path must be one of"):
        parse_config("path=blocked", TileConfig())
