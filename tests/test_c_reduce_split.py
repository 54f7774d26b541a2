"""The generic C path's long reductions keep several partial sums (text/expr.py `_split_reduce`):
how many comes from the target's FMA latency and units, and every reduction kind still agrees
with the reference, tails and whole-tensor (parallel) reductions included."""

from __future__ import annotations

import dataclasses

import pytest

from tests.test_c_patterns import TARGET, check
from uol_core.acg.config import reduction_chains
from uol_core.backends.c.loops import generic as c_generic
from uol_core.backends.c.text.expr import split_parts
from uol_core.odl import parse
from uol_core.ops import load_op


def test_partial_sums_follow_the_adders_latency_and_leave_short_rows_alone():
    assert reduction_chains(TARGET) == 8  # fma_latency_cycles 4 x fma_units 2
    assert split_parts(768, 8, 8) == 8  # 96 vectors: 8 sums of 12
    assert split_parts(128, 8, 8) == 2  # 16 vectors: 2 sums of 8
    assert split_parts(100, 8, 8) == 1  # 12 vectors: fewer than 8 per sum at 2 sums
    assert split_parts(768, 1, 8) == 1  # a target whose add does not wait


def test_layernorm_rows_say_why_they_keep_eight_sums():
    op = load_op("layernorm")
    text = c_generic.emit(op, {"R": 4, "C": 768}, TARGET, {"threads": 1}).text
    assert ("reductions keep up to 8 partial sums, each over a stretch of at least as many "
            "whole 8-lane vectors (HFL test-avx2: fma_latency_cycles 4 x fma_units 2" in text)
    assert "#pragma omp simd reduction(+:acc1, acc1_1, acc1_2, acc1_3, acc1_4, acc1_5, acc1_6, acc1_7)" in text
    assert "const int64_t i_c = e_c + 672;" in text
    quick = dataclasses.replace(TARGET, fma_latency_cycles=1, fma_units=1)
    plain = c_generic.emit(op, {"R": 4, "C": 768}, quick, {"threads": 1}).text
    assert "acc1_1" not in plain and "partial sums" not in plain
    assert "acc1_1" not in c_generic.emit(op, {"R": 4, "C": 96}, TARGET, {"threads": 1}).text


REDUCTIONS = {
    "sum": "Y[r] = sum[c](X[r, c] * 2.0 - 1.0)",
    "mean": "Y[r] = mean[c](X[r, c])",
    "max": "Y[r] = max[c](X[r, c] - 0.5)",
    "min": "Y[r] = min[c](X[r, c])",
    "prod": "Y[r] = prod[c](1.0 + X[r, c] * 0.001)",
}


@pytest.mark.parametrize("kind", sorted(REDUCTIONS))
@pytest.mark.parametrize("cols", [1000, 1024, 131])
@pytest.mark.parametrize("threads", [1, 2])
def test_split_reductions_agree_with_the_reference(kind, cols, threads):
    """1000 columns: 8 sums of 120 and a 40-element tail; 131 on 16 sums' worth of vectors: 2."""
    op = parse(f"op red(X: f32[R, C]) -> Y: f32[R]:\n    {REDUCTIONS[kind]}\n")
    kernel = check(op, {"R": 5, "C": cols}, {"generic": 1, "threads": threads})
    assert ("acc1_1" in kernel.src.text) == (split_parts(cols, 8, 8) > 1)


@pytest.mark.parametrize("threads", [1, 2])
def test_whole_tensor_nested_and_integer_reductions_agree(threads):
    ops = [
        ("op total(X: f32[N]) -> Y: f32[]:\n    Y[] = sum[i](X[i])\n", {"N": 4099}),
        ("op plane(X: f32[B, H, W]) -> Y: f32[B]:\n    Y[b] = sum[h, w](X[b, h, w])\n",
         {"B": 3, "H": 5, "W": 700}),
        ("op count(T: i32[R, C]) -> Y: i32[R]:\n    Y[r] = sum[c](T[r, c] * 3)\n", {"R": 4, "C": 999}),
    ]
    for text, sizes in ops:
        kernel = check(parse(text), sizes, {"generic": 1, "threads": threads})
        assert "acc1_1" in kernel.src.text or "acc2_1" in kernel.src.text, kernel.src.text


def test_an_index_named_like_the_stretch_offset_is_not_shadowed():
    """The stretch offset has its own name kind (`e_c`): an outer index `c_s` (`i_c_s`) stays
    the row the sum reads."""
    op = parse("op shadow(X: f32[S, C]) -> Y: f32[S]:\n    Y[c_s] = sum[c](X[c_s, c])\n")
    kernel = check(op, {"S": 3, "C": 1000}, {"generic": 1, "threads": 1})
    assert "for (int64_t e_c = 0; e_c < 120; ++e_c)" in kernel.src.text
