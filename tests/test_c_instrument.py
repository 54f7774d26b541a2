"""The cycle-counter post-pass: where it places timer reads, and that it changes no result."""

from __future__ import annotations

import re
import shutil

import pytest
import torch

import uol_core
from uol_core.backends.base import KernelSource
from uol_core.backends.c.instrument import PRELUDE, InstrumentError, instrument
from uol_core.ops import op_path

# ODL: line 1 the op, line 2 `s`, line 3 `t`, line 4 `Y`. One shared row loop holds lines 2 and 3
# (the pass opens it); line 4's loop has an unbraced body, a simd pragma and an if/else.
KERNEL = """#include <stdint.h>
#include <math.h>
void uol_k(void **args, const int64_t *strides)
{
    const float *x = (const float *)args[0];
    float *y = (float *)args[1];
    float s[4], t[4];
    for (int64_t r = 0; r < 4; ++r)
    {
        s[r] = 0.0f;
        for (int64_t c = 0; c < 8; ++c)
            s[r] += x[r * 8 + c];
        t[r] = 0.0f;
        #pragma omp simd
        for (int64_t c = 0; c < 8; ++c) {
            t[r] += expf(x[r * 8 + c]);
        }
    }
    for (int64_t r = 0; r < 4; ++r)
        if (t[r] > 0.0f)
            y[r] = s[r] / t[r];
        else
            y[r] = 0.0f;
}
"""
LINE_MAP = {**{i: 1 for i in range(1, 25)}, 8: 2, 9: 2, 10: 2, 11: 2, 12: 2, 13: 3, 14: 3, 15: 3,
            16: 3, 17: 3, 18: 2, 19: 4, 20: 4, 21: 4, 22: 4, 23: 4}


def kernel() -> KernelSource:
    return KernelSource(KERNEL, "c", "uol_k", "k", {}, LINE_MAP, {"args": ["X", "Y"]})


def test_each_statement_gets_its_own_region_inside_a_shared_loop():
    inst = instrument(kernel())
    spans = [(r.first_line, r.last_line, r.odl_line, r.odl_lines) for r in inst.regions]
    assert spans == [(10, 12, 2, (2,)), (13, 17, 3, (3,)), (19, 23, 4, (4,))]
    assert inst.setup_line == 1


def test_the_original_lines_are_kept_in_order_and_the_reads_pair_up():
    inst = instrument(kernel())
    lines = inst.source.text.splitlines()
    reads = [line for line in lines if re.search(r"uol_prof_t\d", line)]
    assert len(reads) == 6
    prelude = PRELUDE.replace("{count}", "3").splitlines()
    at = lines.index(prelude[0])
    assert lines[at:at + len(prelude)] == prelude and at == 2  # after the includes
    kept = [line for line in lines[:at] + lines[at + len(prelude):] if line not in reads]
    assert kept == KERNEL.splitlines()
    # a timer read never splits a pragma from its loop, nor an if from its else
    for i, line in enumerate(lines):
        if "uol_prof_now()" in line and "const uint64_t" in line:
            assert not lines[i - 1].strip().startswith("#pragma")
            assert not lines[i + 1].strip().startswith("else")
    for i, line in enumerate(lines):
        if line.strip().startswith("else"):
            assert "uol_prof" not in lines[i - 1]


FUSED = """#include <stdint.h>
void uol_f(void **args, const int64_t *strides)
{
    const float *x = (const float *)args[0];
    float *y = (float *)args[1];
    float *z = (float *)args[2];
    #pragma omp simd
    for (int64_t i = 0; i < 16; ++i) {
        y[i] = x[i] * 2.0f;
        z[i] = y[i] + 1.0f;
        z[i] += x[i];
    }
}
"""


def test_a_fused_innermost_loop_is_timed_whole_and_names_both_lines():
    line_map = {**{i: 1 for i in range(1, 14)}, 7: 2, 8: 2, 9: 2, 10: 3, 11: 3, 12: 3}
    inst = instrument(KernelSource(FUSED, "c", "uol_f", "f", {}, line_map, {}))
    assert [(r.first_line, r.last_line, r.odl_line, r.odl_lines) for r in inst.regions] == [
        (7, 12, 3, (2, 3))]  # charged to line 3: it owns three of the five code lines


def test_a_kernel_without_its_entry_is_refused():
    src = KernelSource(KERNEL, "c", "uol_missing", "k", {}, LINE_MAP, {})
    with pytest.raises(InstrumentError, match="uol_missing"):
        instrument(src)


# One op per emitter family: generic passes, row template, flash attention, GEMM, several GEMMs,
# conv, scan, stencil.
FAMILIES = {"layernorm": {"R": 7, "C": 37}, "softmax": {"R": 5, "C": 70},
            "attention": {"S": 19, "D": 16, "T": 23, "E": 8},
            "matmul": {"M": 13, "N": 29, "K": 7}, "swiglu_mlp": {"M": 6, "D": 16, "H": 24},
            "conv2d": {"N": 1, "C": 3, "H": 9, "W": 9, "K": 4, "R": 3, "S": 3},
            "cumsum": {"R": 5, "C": 33}, "stencil5": {"N": 40}}


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_instrumented_kernels_compute_what_the_normal_ones_do(name):
    from uol_core.odl.shapes import shape_of
    from uol_core.runtime.build import build
    from uol_core.runtime.native import NativeKernel

    op = uol_core.parse(op_path(name).read_text())
    sizes = {d: FAMILIES[name].get(d, 8) for d in op.dims}
    src = uol_core.compile(op, shapes=sizes, target="host", backend="c").kernel_source
    inst = instrument(src)
    statements = {line for r in inst.regions for line in r.odl_lines}
    assert statements == set(src.line_map.values()) - {inst.setup_line}
    outputs = []
    for version in (src, inst.source):
        gen = torch.Generator().manual_seed(7)
        tensors = {a: torch.randn(shape_of(op, a, sizes), generator=gen)
                   for a in version.meta["args"]}
        NativeKernel(build(version), version.entry, version.meta["args"],
                     {n: tuple(t.shape) for n, t in tensors.items()})(tensors)
        outputs.append({d.name: tensors[d.name] for d in op.outputs})
    for out_name, value in outputs[0].items():
        # not bit-exact: threads may combine partial sums in a different order run to run
        torch.testing.assert_close(outputs[1][out_name], value, rtol=1e-6, atol=1e-7)
