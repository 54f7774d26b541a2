"""Triton's compiler stages for HFL GPU targets on a machine without a GPU (no device needed):
the stage texts, their line maps back to the kernel source, and the one-line errors."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from uol_core.backends import get_backend
from uol_core.hfl import load_target
from uol_core.ops import load_op
from uol_core.runtime.triton_stage_lines import (
    llvm_source_lines,
    mlir_source_lines,
    ptx_source_lines,
)
from uol_core.runtime.triton_stages import (
    StagesError,
    binary_note,
    compile_stages,
    gpu_arch,
    kernel_specs,
)

pytest.importorskip("triton")


def _generated(op_name: str, sizes: dict, target_name: str, config: dict | None = None):
    target = load_target(target_name)
    backend = get_backend("triton", target)
    op = load_op(op_name)
    plan = backend.plan(op, sizes, target)
    source = backend.emit(plan, config or backend.choose(plan).config)
    return op, source, target


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_softmax_on_h100_has_every_stage_with_lines_back_to_the_source() -> None:
    op, source, target = _generated("softmax", {"R": 1024, "C": 1024}, "h100-sxm")
    (spec,) = kernel_specs(source, op, {"R": 1024, "C": 1024})
    assert spec.constexprs == {"BLOCK_C": 1024, "LOOPED": False}
    result = compile_stages(source.text, spec, gpu_arch(target))
    ttir, ttgir, llir, ptx = (result.stage(n) for n in ("ttir", "ttgir", "llir", "ptx"))
    assert "tt.load" in ttir.text and "ttg." not in ttir.text
    assert "#ttg.blocked" in ttgir.text and '"ttg.num-warps"' in ttgir.text
    assert "define" in llir.text and "void @softmax_rows" in llir.text
    assert ".target sm_90" in ptx.text and "ld.global" in ptx.text
    assert result.binaries == {} and "not assembled" in binary_note(result)
    # the tile's load in every stage comes from the source line that calls tl.load on X
    load_line = _line_of(source.text, "x_4 = tl.load(X_ptr")
    assert ttir.source_lines[_line_of(ttir.text, "tt.load")] == load_line
    assert ptx.source_lines[_line_of(ptx.text, "ld.global")] == load_line
    loads = [n for n, line in enumerate(llir.text.splitlines(), 1) if "ld.global" in line]
    assert {llir.source_lines[n] for n in loads} == {load_line}
    # tl.max is a library function: its inlined body maps to the kernel line that called it
    max_line = _line_of(source.text, "mxv_2 = tl.max(")
    assert max_line in set(ttgir.source_lines.values())
    assert set(ptx.source_lines.values()) <= set(range(1, len(source.text.splitlines()) + 1))


def test_h200_and_a100_get_their_own_architecture() -> None:
    op, source, _ = _generated("relu", {"M": 64, "N": 64}, "h200-sxm")
    (spec,) = kernel_specs(source, op, {"M": 64, "N": 64})
    for target, arch in (("h200-sxm", ".target sm_90a"), ("a100-sxm-80gb", ".target sm_80")):
        result = compile_stages(source.text, spec, gpu_arch(load_target(target)))
        assert arch in result.stage("ptx").text
    mi300x = gpu_arch(load_target("mi300x"))
    assert (mi300x.backend, mi300x.arch, mi300x.warp_size) == ("hip", "gfx942", 64)
    amd = compile_stages(source.text, spec, mi300x)
    amdgcn = amd.stage("amdgcn")
    assert "gfx942" in amdgcn.text and amdgcn.source_lines
    assert "uol-stages-" not in amdgcn.text  # no temporary folder of the compile shows


def test_the_bundled_assembler_builds_a_cubin_offline() -> None:
    op, source, target = _generated("relu", {"M": 64, "N": 64}, "h100-sxm")
    (spec,) = kernel_specs(source, op, {"M": 64, "N": 64})
    result = compile_stages(source.text, spec, gpu_arch(target), binary=True)
    assert result.binaries.get("cubin", 0) > 1000
    assert "built offline" in binary_note(result)


def test_matmul_kernel_types_and_dot() -> None:
    sizes = {"M": 64, "N": 64, "K": 64}
    config = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2}
    op, source, target = _generated("matmul", sizes, "h100-sxm", config)
    (spec,) = kernel_specs(source, op, sizes)
    assert spec.signature["A_ptr"] == "*fp32" and spec.signature["M"] == "i32"
    assert spec.constexprs["BLOCK_M"] == 32 and "M" in spec.divisible
    result = compile_stages(source.text, spec, gpu_arch(target))
    assert "tt.dot" in result.stage("ttir").text
    assert '"ttg.num-warps" = 4' in result.stage("ttgir").text


def test_a_size_of_one_is_a_constant_as_the_jit_makes_it() -> None:
    op, source, _ = _generated("softmax", {"R": 1, "C": 100}, "h100-sxm")
    (spec,) = kernel_specs(source, op, {"R": 1, "C": 100})
    assert spec.signature["R"] == "constexpr" and spec.constexprs["R"] == 1
    assert spec.constexprs["BLOCK_C"] == 128 and "C" not in spec.divisible


def test_errors_are_one_line() -> None:
    with pytest.raises(StagesError, match="not a GPU target") as cpu:
        gpu_arch(load_target("graviton3"))
    assert "\n" not in str(cpu.value)
    nameless = SimpleNamespace(name="mystery", kind="gpu", isa=["ptx"], warp_size=32)
    with pytest.raises(StagesError, match="no sm_XX or gfxNNN"):
        gpu_arch(nameless)
    op, source, target = _generated("relu", {"M": 64, "N": 64}, "h100-sxm")
    (spec,) = kernel_specs(source, op, {"M": 64, "N": 64})
    broken = source.text.replace("tl.arange(0, BLOCK)", "tl.arange(0, BLOCK) + undefined_name")
    with pytest.raises(StagesError) as err:
        compile_stages(broken, spec, gpu_arch(target))
    assert "undefined_name" in str(err.value) and "\n" not in str(err.value)


def test_mlir_locations_resolve_names_and_call_sites() -> None:
    text = "\n".join([
        '#loc = loc("k.py":9:1)',
        '#loc3 = loc("k.py":12:5)',
        '#loc4 = loc("/lib/standard.py":200:3)',
        '#loc5 = loc("acc"(#loc3))',
        "#loc6 = loc(callsite(#loc4 at #loc5))",
        "  %0 = tt.load %p loc(#loc5)",
        "  %1 = arith.maxnumf %a, %b : f32 loc(#loc6)",
        '  %2 = arith.addf %a, %b : f32 loc("k.py":14:2)',
        "  %3 = arith.constant 0 : i32 loc(#loc4)",
    ])
    assert mlir_source_lines(text, "k.py") == {6: 12, 7: 12, 8: 14}


def test_llvm_locations_follow_inlined_at_to_the_kernel() -> None:
    text = "\n".join([
        "  %7 = load float, ptr %6, !dbg !12",
        "  %8 = fcmp ogt float %7, %5, !dbg !18",
        '!1 = !DIFile(filename: "k.py", directory: "")',
        '!20 = !DIFile(filename: "standard.py", directory: "/lib")',
        "!4 = distinct !DISubprogram(name: \"k\", scope: !1, file: !1, line: 9, unit: !0)",
        "!12 = !DILocation(line: 11, column: 11, scope: !4)",
        "!19 = distinct !DILexicalBlockFile(scope: !4, file: !20, discriminator: 0)",
        "!18 = !DILocation(line: 216, column: 16, scope: !19, inlinedAt: !21)",
        "!21 = !DILocation(line: 58, column: 17, scope: !4)",
    ])
    assert llvm_source_lines(text, "k.py") == {1: 11, 2: 58}


def test_ptx_loc_holds_until_the_next_and_skips_other_files() -> None:
    text = "\n".join([
        ".visible .entry k(",
        "{",
        "\t.loc\t1 11 11",
        "\tmov.u32 \t%r1, %ctaid.x;",
        "\t.loc\t2 216 16",
        "\tmax.f32 \t%r2, %r3, %r4;",
        "\t.loc\t1 56 15",
        "\t// begin inline asm",
        "\t.loc\t1 57 15",
        "\tld.global.b32 \t%r5, [%rd1];",
        "\t// end inline asm",
        "}",
        '\t.file\t1 "k.py"',
        '\t.file\t2 "/lib/standard.py"',
    ])
    assert ptx_source_lines(text, "k.py") == {4: 11, 6: 11, 10: 56}
