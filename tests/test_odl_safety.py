"""Codegen safety: pad() on any axis gives reference values in every template (or the generic
path takes the op), out-of-range literals and non-ASCII characters are OdlErrors with a
position, and topology names are checked by HCF itself."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import uol_core
from uol_core.acg.fixtures import fixed_target, runnable_target
from uol_core.backends.c.conv import emitter as c_conv
from uol_core.backends.c.native import compile_c
from uol_core.backends.c.route import emit_any
from uol_core.odl import OdlError, parse
from uol_core.odl.pad_reach import padded_escapes
from uol_core.plans.gemm import UnsupportedOp, lower_contraction
from uol_core.runtime.inputs import random_inputs
from uol_core.runtime.reference import evaluate_all
from uol_core.runtime.verify import compare

TARGET = fixed_target()
CONV_BATCH = ("op conv_pad_batch(X: f32[N - {off}, C, H, W], F: f32[K, C, 3, 3]) -> "
              "Y: f32[N, K, H, W]:\n"
              "    Y[n, k, h, w] = sum[c, r, s](pad(X[n, c, h + r - 1, w + s - 1], 0) * F[k, c, r, s])\n")
ATTENTION_TAIL = ("    mx[i] = max[j](s[i, j])\n    p[i, j] = exp(s[i, j] - mx[i])\n"
                  "    l[i] = sum[j](p[i, j])\n    O[i, e] = sum[j](p[i, j] * V[j, e]) / l[i]\n")
GEMM_A = ("op g(A: f32[M - 1, K], B: f32[K, N]) -> C: f32[M, N]:\n"
          "    C[m, n] = sum[k](pad(A[m, k], 0) * B[k, n])\n")

# (ODL, sizes, the generator the template would pick if it ignored pad)
C_CASES = {
    "conv batch (im2col)": (CONV_BATCH.format(off=1), {"N": 3, "C": 4, "H": 7, "W": 7, "K": 5}),
    "conv batch (row buffer)": (CONV_BATCH.format(off=1),
                                {"N": 3, "C": 4, "H": 9, "W": 32, "K": 5}),
    "conv channel": ("op c(X: f32[N, C - 1, H, W], F: f32[K, C, 3, 3]) -> Y: f32[N, K, H, W]:\n"
                     "    Y[n, k, h, w] = sum[c, r, s](pad(X[n, c, h + r - 1, w + s - 1], 0)"
                     " * F[k, c, r, s])\n", {"N": 2, "C": 4, "H": 7, "W": 7, "K": 5}),
    "flash query": ("op a(Q: f32[S - 1, D], K: f32[T, D], V: f32[T, E]) -> O: f32[S, E]:\n"
                    "    s[i: S, j] = sum[d](pad(Q[i, d], 0) * K[j, d]) * 0.125\n" + ATTENTION_TAIL,
                    {"S": 37, "T": 29, "D": 16, "E": 16}),
    "flash score bias": ("op a(Q: f32[S, D], K: f32[T, D], V: f32[T, E], Bm: f32[S, T - 3]) -> "
                         "O: f32[S, E]:\n    s[i, j] = sum[d](Q[i, d] * K[j, d]) * 0.125 + "
                         "pad(Bm[i, j], -1000)\n" + ATTENTION_TAIL,
                         {"S": 37, "T": 29, "D": 16, "E": 16}),
    "parallel scan": ("op sc(X: f32[N - 5]) -> Y: f32[N]:\n    Y[i] = cumsum[i](pad(X[i], 1))\n",
                      {"N": 70000}),
}


def _run_c(op, sizes):
    kernel = compile_c(op, sizes, TARGET, {"threads": 2})
    inputs = random_inputs(op, kernel.sizes, seed=7)
    return kernel, kernel.run(inputs), evaluate_all(op, inputs)


@pytest.mark.parametrize("name", list(C_CASES))
def test_padded_reads_outside_a_template_axis_match_the_reference(name):
    text, sizes = C_CASES[name]
    op = parse(text)
    assert padded_escapes(op, sizes)  # the case really reads outside a non-spatial axis
    kernel, out, ref = _run_c(op, sizes)
    verdict = compare(out, ref, kernel.src.meta.get("reduction_length", 1))
    assert verdict.ok, (kernel.src.meta["generator"], verdict)


def test_the_conv_template_keeps_spatial_padding():
    op = parse(CONV_BATCH.format(off=0))
    sizes = {"N": 2, "C": 3, "H": 6, "W": 6, "K": 4}
    kernel, out, ref = _run_c(op, sizes)
    assert kernel.src.meta["generator"] == c_conv.GENERATOR  # only h, w leave X: honoured
    assert compare(out, ref, kernel.src.meta["reduction_length"]).ok


REPRODUCER = """
import sys, torch, torch.nn.functional as F
from uol_core.acg.fixtures import fixed_target
from uol_core.backends.c.native import compile_c
from uol_core.odl import parse
from uol_core.runtime.inputs import random_inputs
op = parse(sys.argv[1])
sizes = {"N": int(sys.argv[2]), "C": 16, "H": 32, "W": 32, "K": 8}
kernel = compile_c(op, sizes, fixed_target(), {"threads": 2})
inputs = random_inputs(op, kernel.sizes, seed=7)
Y = kernel.run(inputs)["Y"]
have = inputs["X"].shape[0]
real = F.conv2d(inputs["X"], inputs["F"], padding=1)
print(float((Y[:have] - real).abs().max()), float(Y[have:].abs().max()), kernel.src.meta["generator"])
"""


@pytest.mark.parametrize("n,off", [(1000, 999), (64, 1)])
def test_the_reported_conv_reproducer_neither_crashes_nor_reads_garbage(n, off):
    """X has one image (N - 999 at N = 1000) or one fewer than Y (N - 1 at N = 64): images past
    X's read only padding, so they are exactly 0; the others are torch's convolution. In a child
    process, so that a crash fails the test instead of ending the session."""
    proc = subprocess.run([sys.executable, "-c", REPRODUCER, CONV_BATCH.format(off=off), str(n)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    real_err, padded_max, generator = proc.stdout.split()
    assert float(real_err) < 1e-3 and float(padded_max) == 0.0
    assert generator != c_conv.GENERATOR


@pytest.mark.skipif(runnable_target() is None, reason="no runnable C target on this machine")
@pytest.mark.parametrize("text", [
    GEMM_A,
    "op g(A: f32[M, K - 2], B: f32[K, N]) -> C: f32[M, N]:\n"
    "    C[m, n] = sum[k](pad(A[m, k], 0) * B[k, n])\n",
    "op g(A: f32[M, K], B: f32[K, N], b: f32[N - 3]) -> C: f32[M, N]:\n"
    "    C[m, n] = sum[k](A[m, k] * B[k, n]) + pad(b[n], 5)\n",
], ids=["rows of A", "depth of A", "epilogue bias"])
def test_gemm_with_padded_reads_leaving_a_tensor_matches_the_reference(text):
    op = parse(text)
    sizes = {"M": 33, "N": 40, "K": 21}
    with pytest.raises(UnsupportedOp, match="pad"):
        lower_contraction(op, sizes)
    kernel = uol_core.compile(op, shapes=sizes, target=runnable_target())
    inputs = random_inputs(op, kernel.sizes, seed=3)
    out = kernel(**inputs)
    verdict = compare({"C": out}, evaluate_all(op, inputs), kernel.kernel_source.meta.get(
        "reduction_length", 1))
    assert verdict.ok, verdict


def test_gemm_keeps_its_template_when_padded_reads_stay_inside():
    op = parse("op g(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N]:\n"
               "    C[m, n] = sum[k](pad(A[m, k], 0) * B[k, n])\n")
    assert not padded_escapes(op, {"M": 8, "N": 8, "K": 8})
    assert lower_contraction(op, {"M": 8, "N": 8, "K": 8}).K == 8


def test_rows_template_declines_padded_rows():
    op = parse("op sm(X: f32[R - 1, C]) -> Y: f32[R, C]:\n"
               "    mx[r: R] = max[c: C](pad(X[r, c], 0))\n"
               "    e[r, c: C] = exp(pad(X[r, c], 0) - mx[r])\n"
               "    Y[r, c] = e[r, c] / sum[c](e[r, c])\n")
    _, out, ref = _run_c(op, {"R": 5, "C": 33})
    assert compare(out, ref, 33).ok


@pytest.mark.parametrize("text,line,col,words", [
    ("op a(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] + 18446744073709551621\n", 2, 19, "64-bit"),
    ("op a(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] - -18446744073709551616\n", 2, 20, "64-bit"),
    ("op a(X: i32[N]) -> Y: i32[N]:\n    Y[i] = X[i] + 2147483648\n", 2, 19, "does not fit i32"),
    ("op a(X: i8[N]) -> Y: i8[N]:\n    Y[i] = X[i] * 300\n", 2, 19, "does not fit i8"),
    ("op a(X: f32[N]) -> Y: i8[N]:\n    Y[i] = 200\n", 2, 12, "does not fit i8"),
    ("op a(X: f16[N]) -> Y: f16[N]:\n    Y[i] = X[i] + 70000\n", 2, 19, "largest f16"),
    ("op a(X: i8[N]) -> Y: i8[N]:\n    Y[i] = pad(X[i - 1], 1000)\n", 2, 16, "pad value"),
    ("op a(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i + 99999999999999999999]\n", 2, 18, "64-bit"),
    ("op a(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] * ²\n", 2, 19, "U+00B2"),
    ("op A²(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i]\n", 1, 5, "ASCII"),
    ("op a(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] * x\u0661\n", 2, 20, "U+0661"),
    ("op a(Xé: f32[N]) -> Y: f32[N]:\n    Y[i] = Xé[i]\n", 1, 7, "ASCII"),
    ("op a(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i]\x00\n", 2, 16, "U+0000"),
    ("op a(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] - (X[i] > 0)\n", 2, 12, "bool"),
    ("op a(X: f32[N]) -> Y: f32[N]:\n    Y[i] = exp(X[i] > 0)\n", 2, 16, "bool"),
    ("op a(X: bool[R, C]) -> Y: f16[R]:\n    Y[r] = max[c](X[r, c]) + 2\n", 2, 12, "bool"),
])
def test_bad_numbers_and_characters_are_odl_errors_with_a_position(text, line, col, words):
    with pytest.raises(OdlError) as info:
        parse(text)
    err = info.value
    assert (err.line, err.column) == (line, col), str(err)
    assert words in str(err)


@pytest.mark.parametrize("expr", ["X[i] + 9007199254740992", "X[i] + -2147483648 * 0",
                                  "X[i] * (X[i] > 0)", "where(i < 5000000000, X[i], 0)",
                                  "X[i] + 3.0e38", "pad(s[], 0) * X[i]"])
def test_literals_inside_their_range_still_parse(expr):
    op = parse(f"op a(X: f32[N], s: f32[]) -> Y: f32[N]:\n    Y[i] = {expr}\n")
    out = evaluate_all(op, random_inputs(op, {"N": 4}))
    assert out["Y"].shape == (4,)


def test_a_literal_in_range_gives_the_same_value_in_c_and_the_reference():
    op = parse("op a(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] * 0 + 4611686018427387904\n")
    _, out, ref = _run_c(op, {"N": 5})
    assert torch.equal(out["Y"], ref["Y"]) and float(ref["Y"][0]) == 2.0**62


def test_topology_names_with_control_characters_are_hcf_errors(tmp_path):
    from hcf_sim.errors import HcfError
    from hcf_sim.fabric.topology import build_topology, from_json

    topo = {"name": "t\x00x", "nodes": [{"id": "g0"}, {"id": "g1"}, {"id": "s", "kind": "switch"}],
            "links": [{"src": "g0", "dst": "s"}, {"src": "g1", "dst": "s"}]}
    with pytest.raises(HcfError, match="NUL"):
        from_json(topo)
    with pytest.raises(HcfError, match="node id"):
        from_json({**topo, "name": "t", "nodes": [{"id": "g\n0"}, *topo["nodes"][1:]]})
    with pytest.raises(HcfError, match="topology file"):
        from_json(str(tmp_path / "a\x00b.json"))
    with pytest.raises(HcfError, match="topology"):
        build_topology("ring\x00", 4)
    assert from_json({**topo, "name": "two gpus"}).name == "two gpus"


def test_the_cli_reports_a_bad_topology_file_name_in_one_line():
    from typer.testing import CliRunner

    from uol_cli.main import app
    res = CliRunner().invoke(app, ["hcf", "topology", "--topology", "custom",
                                   "--topology-file", "a\x00b.json"])
    assert res.exit_code == 2 and "not a valid name" in res.output and "Traceback" not in res.output


def test_emit_any_never_crashes_on_the_reported_conv_at_emit_time():
    op = parse(CONV_BATCH.format(off=999))
    src = emit_any(op, {"N": 1000, "C": 16, "H": 32, "W": 32, "K": 8}, TARGET, {"threads": 2})
    assert src.meta["generator"] != c_conv.GENERATOR


@pytest.mark.parametrize("text,sizes", [
    ("op mp(X: f32[N]) -> Y: f32[N]:\n    Y[i] = max[r: 3](pad(X[i + r - 1], -1e999))\n", {"N": 7}),
    ("op mp(X: bf16[N]) -> Y: f32[N]:\n    Y[i] = max[r: 3](pad(X[i + r - 1], -1e999))\n", {"N": 7}),
    ("op sp(X: bf16[N]) -> Y: f32[N]:\n    Y[i] = cumsum[i](pad(X[i - 2], 1))\n", {"N": 4}),
    ("op c(X: f32[N, C, H, W], F: f32[K, C, 3, 3]) -> Y: f32[N, K, H, W]:\n    Y[n, k, h, w] = "
     "sum[c, r, s](pad(X[n, c, h + r - 1, w + s - 1], -1e999) * F[k, c, r, s])\n",
     {"N": 1, "C": 2, "H": 5, "W": 5, "K": 3}),
], ids=["-inf halo", "-inf halo bf16", "bf16 halo", "conv -inf pad"])
def test_pad_values_reach_c_as_the_tensor_stores_them(text, sizes):
    """Infinite pads (written 1e999) and bf16 halo buffers hold the pad value itself."""
    op = parse(text)
    kernel, out, ref = _run_c(op, sizes)
    assert compare(out, ref, kernel.src.meta.get("reduction_length", 1)).ok


@pytest.mark.skipif(runnable_target() is None, reason="no runnable C target on this machine")
def test_an_infinite_constant_in_a_gemm_epilogue_builds():
    op = parse("op g(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N]:\n"
               "    C[m, n] = max(sum[k](A[m, k] * B[k, n]), -1e999)\n")
    kernel = uol_core.compile(op, shapes={"M": 5, "N": 6, "K": 7}, target=runnable_target())
    inputs = random_inputs(op, kernel.sizes, seed=1)
    assert compare({"C": kernel(**inputs)}, evaluate_all(op, inputs), 7).ok


def test_large_integer_literals_print_back_as_integers():
    from uol_core.odl.printer import format_op

    op = parse("op p(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] ** 92233726854775808 + 1e999\n")
    assert parse(format_op(op)) == op
