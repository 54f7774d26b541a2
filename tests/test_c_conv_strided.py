"""Strided convolutions on the C conv template (uol_core/backends/c/conv/emitter.py): output rows
that fill at least half of their vectors take the direct path (input rows deinterleaved into
stride phases in the row buffer), narrower ones the im2col path (the window `s * y + r + off`
packed into the panel the GEMM micro-kernel reads); every stride verified against
torch.nn.functional.conv2d; the kernel must be the template's, not the generic loop nests.
Golden file updated with --update-golden."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as tf

from uol_core.acg.fixtures import fixed_target
from uol_core.backends.c.conv import emitter as c_conv
from uol_core.backends.c.conv.depthwise import depthwise_plan
from uol_core.backends.c.native import compile_c
from uol_core.backends.c.route import emit_any
from uol_core.graph.aten_map import conv2d as conv_text
from uol_core.odl import parse

TARGET = fixed_target()


def _conv_op(x: tuple, w: tuple, stride, padding, bias: bool, relu: bool = False, groups: int = 1):
    """The ODL op the graph importer writes for this conv2d, with a relu statement after it as
    the graph's fusion appends one (the template folds it into its epilogue)."""
    text, out = conv_text(x, w, bias, stride, padding, 1, groups)
    if relu:
        head, body = text.split(":\n", 1)
        dims = ", ".join(f"{i}: {e}" for i, e in zip("nkhw", out))
        body = body.replace("    Y[n, k, h, w] =", f"    z[{dims}] =")
        text = f"{head}:\n{body}    Y[n, k, h, w] = relu(z[n, k, h, w])\n"
    return parse(text)


def _run(op, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, threads: int = 2):
    kernel = compile_c(op, {}, TARGET, {"threads": threads})
    inputs = {"X": x, "F": w} | ({"b": b} if b is not None else {})
    out = kernel.run(inputs)
    return kernel, out["Y"] if isinstance(out, dict) else out


# (input NCHW, filter KCRS, stride, padding, bias, relu)
CASES = [
    ((1, 16, 14, 14), (24, 16, 1, 1), 2, 0, False, False),  # ResNet's shortcut, small
    ((1, 8, 15, 13), (12, 8, 3, 3), 2, 1, True, True),  # 3x3 s2 pad 1, odd sizes, bias + relu
    ((1, 3, 37, 41), (8, 3, 7, 7), 2, 3, True, False),  # the 7x7 stride-2 stem, odd sizes
    ((2, 5, 17, 19), (7, 5, 3, 3), 3, 1, False, True),  # stride 3, batch 2
    ((2, 6, 11, 9), (5, 6, 3, 2), (2, 1), (1, 0), True, False),  # strided rows only
    ((1, 4, 9, 21), (6, 4, 1, 3), (1, 3), 0, False, False),  # strided columns only
    ((2, 40, 12, 12), (9, 40, 3, 3), 2, 1, True, True),  # KDIM = 360 > one vector tile's rows
    ((1, 130, 9, 9), (3, 130, 3, 3), 2, 0, False, False),  # KDIM = 1170: split into KC blocks
]


@pytest.mark.parametrize("x,w,stride,padding,bias,relu", CASES,
                         ids=[f"{'x'.join(map(str, c[1]))}-s{c[2]}-{'x'.join(map(str, c[0]))}"
                              for c in CASES])
@pytest.mark.parametrize("threads", [1, 3])
def test_strided_conv_matches_torch_on_the_template(x, w, stride, padding, bias, relu, threads):
    torch.manual_seed(0)
    op = _conv_op(x, w, stride, padding, bias, relu)
    xt, wt = torch.randn(x), torch.randn(w)
    bt = torch.randn(w[0]) if bias else None
    kernel, y = _run(op, xt, wt, bt, threads)
    ref = tf.conv2d(xt, wt, bt, stride, padding)
    if relu:
        ref = torch.relu(ref)
    assert y.shape == ref.shape
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4)
    meta = kernel.src.meta
    assert meta["generator"] == c_conv.GENERATOR, "fell back to the generic loop nests"
    lanes = 8  # the fixed target's AVX2 vectors
    ow = y.shape[3]
    # rows that fill half their vectors, output channels few enough that im2col's packing
    # would cost half its FMAs: phases, no im2col
    if 2 * ow >= -(-ow // lanes) * lanes and w[0] <= c_conv.STRIDED_DIRECT_LANES * lanes:
        assert "direct path, stride" in meta["fusion"] and "phases" in meta["fusion"]
    else:  # the explanation says why not
        assert "im2col, not the direct path" in meta["fusion"]


def test_plan_carries_the_stride_and_unit_stride_stays_direct():
    plan = c_conv.conv_plan(_conv_op((1, 4, 9, 9), (4, 4, 3, 3), (2, 3), 1, False))
    assert plan is not None and (plan.stride_y, plan.stride_x) == (2, 3) and plan.strided
    unit = c_conv.conv_plan(_conv_op((1, 4, 9, 9), (4, 4, 3, 3), 1, 1, False))
    assert unit is not None and not unit.strided
    wide = emit_any(_conv_op((1, 4, 12, 40), (4, 4, 3, 3), 1, 1, False), {}, TARGET, {"threads": 2})
    assert "direct path: unit stride" in wide.meta["fusion"]
    dilated = parse("op cd(X: f32[N, C, H + 4, W + 4], F: f32[K, C, 3, 3]) -> Y: f32[N, K, H, W]:\n"
                    "    Y[n, k, h, w] = sum[c, r, s](X[n, c, h + 2 * r, w + 2 * s] * F[k, c, r, s])\n")
    assert c_conv.conv_plan(dilated) is None


def test_strided_conv_golden(golden):
    # the 3x3 stride-2 pad-1 conv with bias + relu, as imported: odd sizes, batch 2
    op = _conv_op((2, 4, 11, 9), (6, 4, 3, 3), 2, 1, True, True)
    text = emit_any(op, {}, TARGET, {"threads": 2}).text
    assert "stride 2x2" in text
    golden("c/pattern_conv_strided.c", text)


# depthwise (input NCHW, filter K1RS, stride, padding, bias, relu): the direct path, rows split
# into stride phases
DEPTHWISE = [
    ((1, 8, 16, 16), (8, 1, 3, 3), 2, 1, True, True),  # MobileNetV2's stride-2 3x3
    ((2, 5, 23, 37), (5, 1, 5, 5), 2, 2, False, False),  # EfficientNet's 5x5, odd sizes, batch 2
    ((1, 3, 29, 50), (3, 1, 3, 3), 3, 0, True, False),  # stride 3, no padding
    ((1, 4, 13, 40), (4, 1, 3, 4), (1, 2), (1, 2), False, True),  # strided columns only
    ((1, 4, 21, 18), (4, 1, 2, 3), (3, 1), (0, 1), False, False),  # strided rows only
]


@pytest.mark.parametrize("x,w,stride,padding,bias,relu", DEPTHWISE,
                         ids=[f"{'x'.join(map(str, c[1]))}-s{c[2]}-{'x'.join(map(str, c[0]))}"
                              for c in DEPTHWISE])
@pytest.mark.parametrize("threads", [1, 2])
def test_strided_depthwise_matches_torch_on_the_direct_path(x, w, stride, padding, bias, relu,
                                                            threads):
    torch.manual_seed(1)
    op = _conv_op(x, w, stride, padding, bias, relu, groups=x[1])
    xt, wt = torch.randn(x), torch.randn(w)
    bt = torch.randn(w[0]) if bias else None
    kernel, y = _run(op, xt, wt, bt, threads)
    ref = tf.conv2d(xt, wt, bt, stride, padding, 1, x[1])
    if relu:
        ref = torch.relu(ref)
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4)
    meta = kernel.src.meta
    assert meta["generator"] == c_conv.GENERATOR, "fell back to the generic loop nests"
    assert "depthwise" in meta["fusion"] and "phases" in meta["fusion"], meta["fusion"]


def test_strided_depthwise_plan_and_narrow_rows():
    op = _conv_op((1, 6, 9, 9), (6, 1, 3, 3), 2, 1, False, groups=6)
    plan = depthwise_plan(op)
    assert c_conv.conv_plan(op) is None and plan is not None and (plan.stride_y, plan.stride_x) == (2, 2)
    torch.manual_seed(2)
    xt, wt = torch.randn(1, 6, 9, 9), torch.randn(6, 1, 3, 3)
    _, y = _run(op, xt, wt, None)
    torch.testing.assert_close(y, tf.conv2d(xt, wt, None, 2, 1, 1, 6), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width, direct", [(6, True), (2, False)])
def test_narrow_strided_depthwise_rows_take_whole_vectors_a_quarter_busy(width, direct):
    # AVX2 (8 lanes): 3-pixel output rows (MobileNetV2's 7 of 16 at 14 -> 7) keep the direct
    # path in whole vectors, its alternative being the generic loop nests; 1 pixel does not
    torch.manual_seed(3)
    x = (1, 6, 9, width)
    op = _conv_op(x, (6, 1, 3, 3), 2, 1, True, True, groups=6)
    xt, wt, bt = torch.randn(x), torch.randn(6, 1, 3, 3), torch.randn(6)
    kernel, y = _run(op, xt, wt, bt)
    torch.testing.assert_close(y, torch.relu(tf.conv2d(xt, wt, bt, 2, 1, 1, 6)), rtol=1e-4, atol=1e-4)
    assert (kernel.src.meta["generator"] == c_conv.GENERATOR) == direct
