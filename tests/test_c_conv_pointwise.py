"""Pointwise convolutions read their input in place (c/conv/pointwise.py): no row buffer, and
the image's last tile, where it would run past the input's last plane, reads a zero-padded
copy instead."""

from __future__ import annotations

import pytest

from tests.test_c_conv import TARGET, check
from uol_core.backends.c.route import emit_any
from uol_core.odl import parse

POINTWISE = ("op pw(X: f32[N, C, H, W], F: f32[K, C, 1, 1], b: f32[K], R: f32[N, K, H, W])"
             " -> Y: f32[N, K, H, W]:\n"
             "    Y[n, k, h, w] = sum[c, r, s](X[n, c, h + r, w + s] * F[k, c, r, s]) + b[k]"
             " + R[n, k, h, w]\n")


@pytest.mark.parametrize("sizes", [
    {"N": 1, "C": 24, "K": 16, "H": 7, "W": 7},    # 49 pixels: the last tile reads the copy
    {"N": 2, "C": 5, "K": 9, "H": 14, "W": 14},    # 196: two images, each with its own tail
    {"N": 1, "C": 3, "K": 40, "H": 4, "W": 16},    # whole vectors only: no copy
    {"N": 2, "C": 7, "K": 6, "H": 5, "W": 3},      # 15 pixels: one short tile per image
])
def test_pointwise_convs_read_their_input_in_place(sizes):
    kernel = check(parse(POINTWISE), sizes, {"threads": 2})
    assert "input read in place" in kernel.src.meta["fusion"], kernel.src.meta["fusion"]
    assert "uol_fill_rows" not in kernel.src.text


def test_golden_pointwise_kernel(golden):
    # 7x7 planes of 8-lane vectors: 49 pixels, the image's last tile read from the tail copy
    golden("c/pattern_conv_pointwise.c", emit_any(parse(POINTWISE), {"N": 2, "C": 6, "K": 10, "H": 7,
                                                                   "W": 7}, TARGET, {"threads": 2}).text)


def test_a_padded_or_strided_1x1_keeps_the_row_buffer():
    padded = parse("op pp(X: f32[N, C, H, W], F: f32[K, C, 1, 1]) -> Y: f32[N, K, H, W]:\n"
                   "    Y[n, k, h, w] = sum[c, r, s](pad(X[n, c, h + r - 1, w + s - 1], 0)"
                   " * F[k, c, r, s])\n")
    kernel = check(padded, {"N": 1, "C": 6, "K": 8, "H": 9, "W": 12}, {"threads": 2})
    assert "in place" not in kernel.src.meta["fusion"]


@pytest.mark.parametrize("sizes", [{"N": 2, "C": 5, "K": 9, "H": 7, "W": 7},
                                   {"N": 1, "C": 3, "K": 20, "H": 5, "W": 3}])
def test_reading_in_place_stays_inside_the_input(sizes):
    # the last tile of the last channel would read up to LANES - 1 floats past the input; the
    # sanitizers see any read past an allocation
    from profilers.sanitizer import sanitize_op

    report = sanitize_op(POINTWISE, sizes)
    assert report.clean, report.findings[:2]
