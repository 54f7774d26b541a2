"""ODL text -> IR: the syntax the language promises, and located errors for everything else."""

import pytest

from uol_core.odl import OdlError, parse, parse_module
from uol_core.odl.ir import Access, Affine, Binary, Call, Cast, Const, DType, Reduce, Scan, Var
from uol_core.odl.printer import format_op

MATMUL = """
op linear_gelu(A: f32[M, K], W: f32[K, N], b: f32[N]) -> Y: f32[M, N]:
    Y[m, n] = gelu(sum[k](A[m, k] * W[k, n]) + b[n])
"""


def test_signature_and_statement_parse_as_they_read():
    op = parse(MATMUL)
    assert op.name == "linear_gelu"
    assert [d.name for d in op.inputs] == ["A", "W", "b"]
    assert op.outputs[0].shape == (Affine.of("M"), Affine.of("N"))
    stmt = op.stmts[0]
    assert stmt.target == "Y" and stmt.indices == ("m", "n") and stmt.line == 3
    gelu = stmt.expr
    assert isinstance(gelu, Call) and gelu.fn == "gelu"
    add = gelu.args[0]
    assert isinstance(add, Binary) and add.op == "add"
    assert isinstance(add.lhs, Reduce) and add.lhs.indices == ("k",)
    assert add.rhs == Access("b", (Affine.of("n"),))


def test_affine_shapes_and_indices():
    op = parse("""
op conv2d(X: f32[N, C, H, W], F: f32[K, C, R, S]) -> Y: f32[N, K, H - R + 1, W - S + 1]:
    Y[n, k, h, w] = sum[c, r, s](X[n, c, h + r, w + s] * F[k, c, r, s])
""")
    assert str(op.outputs[0].shape[2]) == "H - R + 1"
    access = op.stmts[0].expr.body.lhs
    assert access.indices[2] == Affine.of("h") + Affine.of("r")


def test_strided_and_reversed_indices():
    op = parse("op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[N - 1 - i]\n")
    assert op.stmts[0].expr.indices[0] == Affine((("N", 1), ("i", -1)), -1)
    op = parse("op p(X: f32[2*N]) -> Y: f32[N]:\n    Y[i] = X[2*i] + X[2 * i + 1]\n")
    assert op.stmts[0].expr.rhs.indices[0] == Affine((("i", 2),), 1)


def test_every_dtype_and_scalar_output():
    for dtype in DType:
        op = parse(f"op f(X: {dtype.value}[N]) -> Y: f32[]:\n    Y[] = sum[i](f32(X[i]))\n")
        assert op.inputs[0].dtype is dtype
        assert op.outputs[0].shape == ()
        assert isinstance(op.stmts[0].expr.body, Cast)


def test_multiple_outputs_intermediates_and_comments():
    op = parse("""
# mean and variance of each row
op moments(X: f32[R, C]) -> (mu: f32[R], var: f32[R]):
    mu[r] = mean[c](X[r, c])   # the mean
    d[r, c] = X[r, c] - mu[r]
    var[r] = mean[c](d[r, c] * d[r, c])
""")
    assert [d.name for d in op.outputs] == ["mu", "var"]
    assert [d.name for d in op.locals] == ["d"]
    assert op.locals[0].shape == (Affine.of("R"), Affine.of("C"))


def test_where_comparisons_index_values_and_constants():
    op = parse("""
op causal(Q: f32[S, D], K: f32[S, D]) -> P: f32[S, S]:
    P[i, j] = where(j <= i and not (i == 3), sum[d](Q[i, d] * K[j, d]) * 0.125, -1e30)
""")
    cond, scaled, fill = op.stmts[0].expr.args
    assert cond.op == "and" and cond.lhs == Binary("le", Var("j"), Var("i"))
    assert fill == Const(-1e30)
    assert scaled.rhs == Const(0.125)


def test_functions_power_scan_and_pad():
    op = parse("""
op f(X: f32[R, C]) -> (Y: f32[R, C], Z: f32[R, C]):
    Y[r, c] = cumsum[c](exp(X[r, c]) ** 2 + pow(abs(X[r, c]), 0.5))
    Z[r, c] = pad(X[r, c - 1], 0) + max(X[r, c], 0) + rsqrt(1 + erf(silu(X[r, c])))
""")
    assert isinstance(op.stmts[0].expr, Scan) and op.stmts[0].expr.index == "c"
    pad = op.stmts[1].expr.lhs.lhs
    assert isinstance(pad, Access) and pad.pad == 0.0


@pytest.mark.parametrize("fn", ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu",
                                "gelu", "gelu_tanh", "silu", "abs", "erf"])
def test_named_functions(fn):
    op = parse(f"op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = {fn}(X[i])\n")
    assert op.stmts[0].expr == Call(fn, (Access("X", (Affine.of("i"),)),))


def test_module_with_several_ops():
    text = MATMUL + "\nop twice(X: f32[N]) -> Y: f32[N]:\n    Y[i] = 2 * X[i]\n"
    assert [op.name for op in parse_module(text)] == ["linear_gelu", "twice"]


def test_printer_round_trips():
    op = parse(MATMUL)
    assert parse(format_op(op)) == op


def err(text: str) -> OdlError:
    with pytest.raises(OdlError) as info:
        parse(text)
    return info.value


@pytest.mark.parametrize("text, line, column, words", [
    ("op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] +\n", 2, 18, "expected a number"),
    ("op f(X: f32[N]) -> Y: f32[N]\n    Y[i] = X[i]\n", 1, 29, "expected ':'"),
    ("op f(X: f33[N]) -> Y: f32[N]:\n    Y[i] = X[i]\n", 1, 9, "element type"),
    ("op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] $ 2\n", 2, 17, "unexpected character"),
    ("op f(X: f32[N]) -> Y: f32[N]:\nY[i] = X[i]\n", 2, 1, "indented statement"),
    ("op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = foo(X[i])\n", 2, 12, "unknown function"),
    ("op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i * i]\n", 2, 14, "affine"),
    ("op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i - 1]\n", 2, 12, "below 0"),
    ("op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i + 1]\n", 2, 12, "past N"),
    ("op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = Z[i]\n", 2, 12, "not defined"),
    ("op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[j]\n", 2, 12, "not bound"),
    ("op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i, i]\n", 2, 12, "rank 1"),
    ("op f(X: f32[N]) -> Y: f32[N]:\n    Z[i] = X[i]\n", 1, 1, "never assigned"),
    ("op f(X: f32[N]) -> Y: f32[N]:\n    X[i] = Y[i]\n", 2, 1, "is an input"),
    ("op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = t[i]\n    t[i] = X[i]\n", 2, 12, "not defined"),
    ("op f(X: f32[N], Z: f32[M]) -> Y: f32[N]:\n    Y[i] = X[i] + Z[i]\n", 2, 1, "extent"),
    ("op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X\n", 2, 12, "needs indices"),
    ("op f(X: f32[N]) -> Y: f32[N]:\n    t[i, j] = X[i]\n    Y[i] = t[i, 0]\n", 2, 1, "extent of index 'j'"),
    ("", 1, 1, "empty file"),
])
def test_errors_name_line_column_and_expectation(text, line, column, words):
    error = err(text)
    assert (error.line, error.column) == (line, column), str(error)
    assert words in error.message


def test_error_render_shows_line_and_caret():
    error = err("op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] +\n")
    text = error.render()
    lines = text.splitlines()
    assert lines[0].startswith("<odl>:2:18: error:")
    assert lines[1].strip() == "Y[i] = X[i] +"
    assert lines[2].index("^") == 4 + 17


def test_oversized_input_and_too_many_statements_are_refused():
    assert "larger than" in err("#" * 100_001).message
    body = "".join(f"    t{i}[i] = X[i]\n" for i in range(70))
    assert "more than 64 statements" in err("op f(X: f32[N]) -> Y: f32[N]:\n" + body).message


def test_deep_nesting_is_an_odl_error_not_a_crash():
    deep = "(" * 500 + "X[i]" + ")" * 500
    assert "nested too deeply" in err(f"op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = {deep}\n").message


def test_pad_allows_out_of_range_reads():
    op = parse("op d(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] - pad(X[i - 1], 0)\n")
    assert op.stmts[0].expr.rhs.pad == 0.0
