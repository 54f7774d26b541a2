"""The reference evaluator against independent, hand-written torch formulas."""

import pytest
import torch
import torch.nn.functional as F

from uol_core import evaluate, parse
from uol_core.odl.shapes import ShapeError

torch.manual_seed(0)


def run(text, **tensors):
    return evaluate(parse(text), **tensors)


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (7, 13, 5), (33, 17, 2)])
def test_contraction_matches_matmul(m, k, n):
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = run("op mm(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N]:\n"
              "    C[m, n] = sum[k](A[m, k] * B[k, n])\n", A=a, B=b)
    torch.testing.assert_close(out, a @ b)


def test_scaled_contraction_and_constant_factor():
    a, b = torch.randn(4, 6), torch.randn(5, 6)
    out = run("op nt(A: f32[M, K], B: f32[N, K]) -> C: f32[M, N]:\n"
              "    C[m, n] = sum[k](2 * A[m, k] * B[n, k] * 0.5)\n", A=a, B=b)
    torch.testing.assert_close(out, a @ b.T)


def test_reduction_over_index_missing_from_one_factor():
    a, b = torch.randn(3, 4), torch.randn(5)
    out = run("op f(A: f32[M, K], B: f32[J]) -> C: f32[M]:\n"
              "    C[m] = sum[k, j](A[m, k] * B[j])\n", A=a, B=b)
    torch.testing.assert_close(out, a.sum(1) * b.sum())


def test_reductions_max_min_mean_prod():
    x = torch.randn(5, 7)
    text = ("op r(X: f32[R, C]) -> (hi: f32[R], lo: f32[R], avg: f32[R], pr: f32[R]):\n"
            "    hi[r] = max[c](X[r, c])\n    lo[r] = min[c](X[r, c])\n"
            "    avg[r] = mean[c](X[r, c])\n    pr[r] = prod[c](X[r, c])\n")
    out = run(text, X=x)
    torch.testing.assert_close(out["hi"], x.max(1).values)
    torch.testing.assert_close(out["lo"], x.min(1).values)
    torch.testing.assert_close(out["avg"], x.mean(1))
    torch.testing.assert_close(out["pr"], x.prod(1))


def test_softmax_with_shadowed_reduction_index():
    x = torch.randn(6, 11)
    out = run("op softmax(X: f32[R, C]) -> Y: f32[R, C]:\n    mx[r] = max[c](X[r, c])\n"
              "    e[r, c] = exp(X[r, c] - mx[r])\n    Y[r, c] = e[r, c] / sum[c](e[r, c])\n", X=x)
    torch.testing.assert_close(out, torch.softmax(x, dim=1))


def test_conv2d_windows():
    x, w = torch.randn(2, 3, 9, 8), torch.randn(4, 3, 3, 2)
    out = run("op conv(X: f32[N, C, H, W], F: f32[K, C, R, S]) -> Y: f32[N, K, H - R + 1, W - S + 1]:\n"
              "    Y[n, k, h, w] = sum[c, r, s](X[n, c, h + r, w + s] * F[k, c, r, s])\n", X=x, F=w)
    torch.testing.assert_close(out, F.conv2d(x, w), atol=1e-4, rtol=1e-4)


def test_zero_padding_and_strides():
    x = torch.randn(10)
    out = run("op d(X: f32[N]) -> Y: f32[N]:\n    Y[i] = pad(X[i + 1], 0) - pad(X[i - 1], 0)\n", X=x)
    padded = F.pad(x, (1, 1))
    torch.testing.assert_close(out, padded[2:] - padded[:-2])
    out = run("op pool(X: f32[2*N]) -> Y: f32[N]:\n    Y[i] = max(X[2*i], X[2*i + 1])\n", X=x)
    torch.testing.assert_close(out, F.max_pool1d(x[None, None], 2)[0, 0])


def test_reversed_index_with_dimension_symbol():
    x = torch.randn(9)
    out = run("op rev(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[N - 1 - i]\n", X=x)
    torch.testing.assert_close(out, x.flip(0))


def test_where_with_index_values_and_dimension_value():
    q, k = torch.randn(5, 4), torch.randn(5, 4)
    out = run("op c(Q: f32[S, D], K: f32[S, D]) -> P: f32[S, S]:\n"
              "    P[i, j] = where(j <= i, sum[d](Q[i, d] * K[j, d]) / D, -1e30)\n", Q=q, K=k)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    torch.testing.assert_close(out, torch.where(mask, q @ k.T / 4, torch.tensor(-1e30)))


def test_integer_labels_select_a_class():
    logits, labels = torch.randn(6, 5), torch.randint(0, 5, (6,), dtype=torch.int32)
    out = run("op pick(X: f32[R, C], T: i32[R]) -> L: f32[R]:\n"
              "    L[r] = sum[c](where(c == T[r], X[r, c], 0))\n", X=logits, T=labels)
    torch.testing.assert_close(out, logits.gather(1, labels.long()[:, None])[:, 0])


@pytest.mark.parametrize("fn, ref", [
    ("exp", torch.exp), ("tanh", torch.tanh), ("sigmoid", torch.sigmoid), ("relu", torch.relu),
    ("gelu", F.gelu), ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")), ("silu", F.silu),
    ("abs", torch.abs), ("erf", torch.erf),
])
def test_unary_functions(fn, ref):
    x = torch.randn(17)
    torch.testing.assert_close(run(f"op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = {fn}(X[i])\n", X=x),
                               ref(x))


def test_log_sqrt_rsqrt_pow_on_positive_values():
    x = torch.rand(13) + 0.5
    out = run("op f(X: f32[N]) -> (a: f32[N], b: f32[N], c: f32[N], d: f32[N]):\n"
              "    a[i] = log(X[i])\n    b[i] = sqrt(X[i])\n    c[i] = rsqrt(X[i])\n"
              "    d[i] = X[i] ** 3 + pow(X[i], 0.5)\n", X=x)
    torch.testing.assert_close(out["a"], x.log())
    torch.testing.assert_close(out["b"], x.sqrt())
    torch.testing.assert_close(out["c"], x.rsqrt())
    torch.testing.assert_close(out["d"], x**3 + x.sqrt())


def test_cumsum_along_columns():
    x = torch.randn(3, 7)
    out = run("op c(X: f32[R, C]) -> Y: f32[R, C]:\n    Y[r, c] = cumsum[c](X[r, c] * 2)\n", X=x)
    torch.testing.assert_close(out, torch.cumsum(2 * x, dim=1))


def test_half_precision_inputs_compute_in_f32_and_round_at_store():
    x = torch.randn(64).half()
    out = run("op s(X: f16[N]) -> Y: f16[]:\n    Y[] = sum[i](X[i])\n", X=x)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, x.float().sum().half())


def test_casts_and_bool_outputs():
    x = torch.randn(8)
    out = run("op c(X: f32[N]) -> (m: bool[N], k: i32[N]):\n    m[i] = X[i] > 0\n"
              "    k[i] = i32(X[i] * 10)\n", X=x)
    assert out["m"].dtype == torch.bool and torch.equal(out["m"], x > 0)
    assert torch.equal(out["k"], (x * 10).to(torch.int32))


def test_broadcast_output_index():
    b = torch.randn(4)
    out = run("op rep(b: f32[N], X: f32[M, N]) -> Y: f32[M, N]:\n    Y[m, n] = b[n]\n",
              b=b, X=torch.zeros(3, 4))
    torch.testing.assert_close(out, b.expand(3, 4))


def test_shape_errors_name_tensor_and_limit():
    op = parse("op mm(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N]:\n"
               "    C[m, n] = sum[k](A[m, k] * B[k, n])\n")
    with pytest.raises(ShapeError, match="K is 3 elsewhere but 4"):
        evaluate(op, A=torch.randn(2, 3), B=torch.randn(4, 5))
    with pytest.raises(ShapeError, match="rank 2"):
        evaluate(op, A=torch.randn(2), B=torch.randn(4, 5))
    with pytest.raises(ShapeError, match="needs inputs B"):
        evaluate(op, A=torch.randn(2, 3))


def test_concrete_bounds_check_for_affine_output():
    op = parse("op v(X: f32[N], F: f32[R]) -> Y: f32[N - R + 1]:\n"
               "    Y[i] = sum[r](X[i + r] * F[r])\n")
    with pytest.raises(ShapeError, match="must be >= 1"):
        evaluate(op, X=torch.randn(2), F=torch.randn(3))
    torch.testing.assert_close(evaluate(op, X=torch.arange(5.0), F=torch.ones(2)),
                               torch.tensor([1.0, 3, 5, 7]))


def test_every_unary_function_has_a_rule_everywhere():
    """A function ODL accepts is evaluated, emitted for C (float and double) and Triton, and
    differentiated: adding one to the language means adding it to each of these."""
    from uol_core.backends.c.text.expr import FUNCS
    from uol_core.backends.triton.expr import UNARY_RULES as TRITON
    from uol_core.odl.derivatives import Differentiator
    from uol_core.odl.ir import UNARY_FUNCTIONS, Var
    from uol_core.runtime.reference import UNARY_RULES

    for fn in UNARY_FUNCTIONS:
        assert fn in UNARY_RULES and fn in FUNCS["float"] and fn in FUNCS["double"], fn
        assert fn in TRITON, fn
        Differentiator.local_slope(fn, Var("x"), Var("y"))  # raises where there is no rule
