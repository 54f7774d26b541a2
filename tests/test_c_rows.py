"""The row softmax / log-softmax template: what it matches, odd widths, streaming stores, golden C
(update with `pytest --update-golden`)."""

from __future__ import annotations

import pytest
from test_c_patterns import check  # tests/ is on sys.path (pytest prepend mode)

from uol_core.acg.fixtures import fixed_target
from uol_core.backends.c.route import emit_any
from uol_core.backends.c.rows.emitter import row_plan
from uol_core.odl import parse
from uol_core.ops import load_op

ROW_OPS = {
    "scaled": ("op sm2(X: f32[B, R, C]) -> Y: f32[B, R, C]:\n"
               "    mx[b, r] = max[c](X[b, r, c])\n"
               "    e[b, r, c] = exp((X[b, r, c] - mx[b, r]) * 0.5)\n"
               "    Y[b, r, c] = e[b, r, c] / sum[c](e[b, r, c])\n"),
    "divided": ("op sm3(X: f32[R, C]) -> Y: f32[R, C]:\n"
                "    mx[r] = max[c](X[r, c])\n"
                "    e[r, c] = exp((X[r, c] - mx[r]) / 3.0)\n"
                "    Y[r, c] = e[r, c] / sum[c](e[r, c])\n"),
}


@pytest.mark.parametrize("cols", [1, 7, 8, 33, 100, 259])
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "softmax_temperature", *ROW_OPS])
def test_row_template_verifies_at_odd_widths(name, cols):
    op = parse(ROW_OPS[name]) if name in ROW_OPS else load_op(name)
    sizes = {"B": 2, "R": 5, "C": cols}
    src = check(op, {d: sizes[d] for d in op.dims}).src
    assert src.meta["generator"] == "uol-c-rows-1", src.text[:300]
    assert "uol_vexp(" in src.text and "#pragma omp for" in src.text


def test_row_template_streams_large_outputs_and_declines_what_it_does_not_match():
    op = load_op("softmax")
    # stream forced on: aligned rows use non-temporal stores, then the fence
    src = check(op, {"R": 6, "C": 64}, {"stream": 1}).src
    assert "_stream_ps(" in src.text and "_mm_sfence()" in src.text
    assert "_stream_ps(" not in check(op, {"R": 6, "C": 64}).src.text  # 1.5 KiB fits any cache
    masked = parse("op sm4(X: f32[R, C]) -> Y: f32[R, C]:\n"
                   "    mx[r] = max[c](X[r, c])\n"
                   "    e[r, c] = exp(X[r, c] - mx[r] + 1.0)\n"
                   "    Y[r, c] = e[r, c] / sum[c](e[r, c])\n")
    assert row_plan(masked) is None and row_plan(load_op("layernorm")) is None


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_row_template_golden(name, golden):
    text = emit_any(load_op(name), {"R": 32, "C": 100}, fixed_target(), {"threads": 2}).text
    golden(f"c/template_row_{name}.c", text)

