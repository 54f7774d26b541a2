"""The conv template's filter packed once (uol_core/backends/c/conv/prepacked.py): the variant that
reads its filter argument as panels gives the per-call kernel's result on every path (direct,
im2col, strided, depthwise, fused epilogue), and the default kernel text is unchanged."""

from __future__ import annotations

import pytest
import torch

from uol_core.acg.fixtures import fixed_target
from uol_core.backends.c.conv import emitter as c_conv
from uol_core.backends.c.conv.prepacked import (
    emit_prepacked,
    pack_filter,
    packed_numel,
    prepack_refusal,
)
from uol_core.backends.c.native import CKernel, compile_c
from uol_core.odl import parse
from uol_core.ops import load_op
from uol_core.runtime.inputs import random_inputs

TARGET = fixed_target()

CASES = [
    ("conv2d_bias_relu", {"N": 1, "C": 3, "K": 5, "H": 7, "W": 9, "R": 3, "S": 3}),  # direct
    ("conv2d_pad1", {"N": 2, "C": 5, "K": 13, "H": 11, "W": 17}),  # MDIM not a multiple of MR
    ("conv2d", {"N": 1, "C": 37, "K": 17, "H": 5, "W": 5, "R": 1, "S": 1}),  # narrow: im2col
    ("conv2d_stride2", {"N": 1, "C": 6, "K": 9, "H": 8, "W": 8}),  # strided: im2col
    ("depthwise_conv2d", {"N": 2, "C": 5, "H": 9, "W": 13, "R": 3, "S": 3}),  # depthwise
]


def _filter_name(src) -> str:
    return src.meta["filter_panels"]["filter"]


@pytest.mark.parametrize("name,sizes", CASES, ids=[n for n, _ in CASES])
def test_prepacked_variant_matches_the_per_call_kernel(name, sizes):
    op = load_op(name)
    kernel = compile_c(op, sizes, TARGET, {"threads": 2})
    assert kernel.src.meta["generator"] == c_conv.GENERATOR
    assert prepack_refusal(op, kernel.src) is None
    inputs = random_inputs(op, kernel.sizes, seed=3)
    expected = kernel.run(inputs)
    variant_src = emit_prepacked(op, kernel.sizes, TARGET, {"threads": 2})
    assert "uol_pack_filter" not in variant_src.text and "free(Ap)" not in variant_src.text
    assert "uol_pack_filter" in kernel.src.text  # the default kernel still packs per call
    variant = CKernel(variant_src, op, kernel.sizes)
    name_f = _filter_name(kernel.src)
    weight = inputs[name_f]
    packed = pack_filter(weight, kernel.src)
    assert packed.numel() == packed_numel(kernel.src) >= weight.numel()
    # the kernel reads the panels through the filter's argument: a view of the filter's shape
    view = packed.as_strided(tuple(weight.shape), torch.empty(weight.shape).stride())
    got = variant.run({**inputs, name_f: view})
    for out, value in expected.items():
        assert torch.equal(got[out], value), f"{name}: {out} differs from the per-call kernel"


def test_a_filter_read_by_the_epilogue_is_not_packed_ahead():
    op = parse("op cf(X: f32[N, C, H, W], F: f32[K, C, 1, 1]) -> Y: f32[N, K, H, W]:\n"
               "    Y[n, k, h, w] = sum[c, r, s](X[n, c, h + r, w + s] * F[k, c, r, s])"
               " + F[k, 0, 0, 0]\n")
    kernel = compile_c(op, {"N": 1, "C": 4, "K": 3, "H": 6, "W": 16}, TARGET, {"threads": 1})
    assert kernel.src.meta["generator"] == c_conv.GENERATOR
    assert "epilogue reads the filter" in prepack_refusal(op, kernel.src)


def test_a_kernel_without_panels_is_refused():
    op = load_op("conv2d")
    kernel = compile_c(op, {"N": 1, "C": 3, "K": 5, "H": 7, "W": 7, "R": 3, "S": 3}, TARGET,
                       {"threads": 1, "generic": 1})
    assert "not the conv template" in prepack_refusal(op, kernel.src)


SE_REDUCE = ("op se(X: f32[N, C, 1, 1], F: f32[K, C, 1, 1], b: f32[K]) -> Y: f32[N, K, 1, 1]:\n"
             "    t[n: N, k: K, h: 1, w: 1] = sum[c, r, s](X[n, c, h + r, s + w] * F[k, c, r, s])"
             " + b[k]\n"
             "    Y[n, k, h, w] = silu(t[n, k, h, w])\n")


@pytest.mark.parametrize("sizes,threads", [({"N": 1, "C": 1152, "K": 48}, 2),
                                           ({"N": 3, "C": 20, "K": 700}, 1),
                                           ({"N": 2, "C": 600, "K": 600}, 2)])  # threads split K
def test_one_pixel_is_a_matrix_vector_product(sizes, threads):
    """A squeeze-and-excitation 1x1 conv on pooled channels: the filter's rows read in place
    (nothing to pack ahead), the result as torch's."""
    op = parse(SE_REDUCE)
    kernel = compile_c(op, sizes, TARGET, {"threads": threads})
    assert "matrix-vector" in kernel.src.meta["fusion"]
    assert "uol_pack_filter" not in kernel.src.text
    assert "reads its filter in place" in prepack_refusal(op, kernel.src)
    inputs = random_inputs(op, kernel.sizes, seed=5)
    want = torch.nn.functional.silu(torch.nn.functional.conv2d(inputs["X"], inputs["F"], inputs["b"]))
    torch.testing.assert_close(kernel.run(inputs)["Y"], want, rtol=1e-4, atol=1e-4)


def test_one_pixel_strided_and_padded():
    """One output pixel of a strided window, and one whose window lies in the padding."""
    strided = parse("op s2(X: f32[2, 7, 2, 2], F: f32[5, 7, 1, 1]) -> Y: f32[2, 5, 1, 1]:\n"
                    "    Y[n, k, h, w] = sum[c, r, s](X[n, c, 2*h + r, 2*w + s] * F[k, c, r, s])\n")
    padded = parse("op p1(X: f32[2, 7, 1, 1], F: f32[5, 7, 1, 1]) -> Y: f32[2, 5, 1, 1]:\n"
                   "    Y[n, k, h, w] = sum[c, r, s](pad(X[n, c, h + r - 1, w + s - 1], 0.5)"
                   " * F[k, c, r, s])\n")
    for op, want in ((strided, lambda i: torch.nn.functional.conv2d(i["X"], i["F"], stride=2)),
                     (padded, lambda i: (0.5 * i["F"].sum(dim=(1, 2, 3))).view(1, 5, 1, 1)
                      .expand(2, 5, 1, 1))):
        kernel = compile_c(op, {}, TARGET, {"threads": 2})
        assert "matrix-vector" in kernel.src.meta["fusion"], op.name
        inputs = random_inputs(op, kernel.sizes, seed=2)
        torch.testing.assert_close(kernel.run(inputs)["Y"], want(inputs), rtol=1e-4, atol=1e-4)
