"""Loop order and padding choices of the generic C path, checked in the emitted text and
against the reference: a transposed convolution's short inner axes, a concatenation's pads."""

from __future__ import annotations

import re

import torch

from uol_core import compile as uol_compile
from uol_core.graph import aten_map
from uol_core.odl import parse
from uol_core.runtime.reference import evaluate_all


def _compiled(text: str, shapes: dict, config=None):
    op = parse(text)
    kernel = uol_compile(op, shapes=shapes, backend="c", config=config)
    gen = torch.Generator().manual_seed(0)
    inputs = {n: torch.randn(*s, generator=gen) for n, s in shapes.items()}
    got = kernel(**inputs)
    want = evaluate_all(op, inputs)[op.outputs[0].name]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    return kernel.source


def test_a_transposed_convolution_accumulates_along_its_long_axis():
    # y[n, k, h, a, w, e]: e and a run twice each; w runs 16 times along X's rows
    text, _ = aten_map.conv_transpose2d_patches((2, 8, 4, 16), (8, 4, 2, 2), True)
    source = _compiled(text, {"X": (2, 8, 4, 16), "F": (8, 4, 2, 2), "b": (4,)})
    accumulators = re.findall(r"float vacc\d+\[(\d+)\];", source)
    assert accumulators == ["16"], accumulators  # a row of w, not a pair of e
    loops = re.findall(r"for \(int64_t i_(\w+) = 0", source)
    assert loops.index("e") < loops.index("c") < len(loops) - 1 - loops[::-1].index("w")


def test_a_concatenation_reads_its_operands_in_place():
    text, _ = aten_map.cat([(2, 3, 5), (2, 4, 5)], 1)
    source = _compiled(text, {"A0": (2, 3, 5), "A1": (2, 4, 5)})
    # margins as wide as the axis: a bounds test per read, no padded copy of either operand
    assert "malloc" not in source and "h0_A0" not in source


def test_a_padded_stencil_still_reads_from_a_halo_copy():
    text = ("op smooth(X: f32[N, W]) -> Y: f32[N, W]:\n"
            "    Y[n, w] = pad(X[n, w - 1], 0) + X[n, w] + pad(X[n, w + 1], 0)\n")
    source = _compiled(text, {"X": (3, 40)})
    assert "h0_X" in source  # one column of margin each side: the copy pays


def test_a_depthwise_convolution_fills_its_halo_row_by_row():
    # the generic path's halo (rows this wide take the conv template's depthwise path)
    text, _ = aten_map.conv2d((2, 3, 9, 11), (3, 1, 3, 3), True, (1, 1), (2, 1), (1, 1), 3)
    shapes = {"X": (2, 3, 9, 11), "F": (3, 1, 3, 3), "b": (3,)}
    source = _compiled(text, shapes, "generic=1")
    gen = torch.Generator().manual_seed(1)
    x, f, b = (torch.randn(*s, generator=gen) for s in shapes.values())
    got = uol_compile(parse(text), shapes=shapes, backend="c", config="generic=1")(X=x, F=f, b=b)
    want = torch.nn.functional.conv2d(x, f, b, padding=(2, 1), groups=3)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # one division chain per row of the copy, then three vector loops (margins and interior)
    assert "h0_X" in source and f"q < {2 * 3 * (9 + 4)}" in source
    assert "row[1 + j] = t_X[src + j]" in source
