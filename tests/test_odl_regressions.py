"""Regression tests for bugs found in the parser, checker and reference evaluator."""

from __future__ import annotations

import pytest
import torch

from uol_core.odl import OdlError, parse
from uol_core.odl.shapes import ShapeError, bind_sizes
from uol_core.runtime.reference import evaluate

# ---- 1. A declared output extent smaller than a pure read's axis (valid-region stencils).
# The checker rejected `Y: f32[N - 2]` reading `X[i]` ("extent N - 2 ... but N"), and the
# evaluator's view path then broadcast the whole axis against the narrower output.

STENCIL3 = """
op stencil3(X: f32[N]) -> Y: f32[N - 2]:
    Y[i] = X[i] + 2.0 * X[i + 1] + X[i + 2]
"""

GLU = """
op glu(X: f32[R, 2*C]) -> Y: f32[R, C]:
    Y[r, c] = X[r, c] * sigmoid(X[r, c + C])
"""


def test_declared_extent_may_be_a_prefix_of_a_read_axis():
    op = parse(STENCIL3)
    x = torch.randn(9)
    torch.testing.assert_close(evaluate(op, X=x), x[:-2] + 2 * x[1:-1] + x[2:])


def test_prefix_read_inside_a_contraction():
    op = parse("""
op head(A: f32[M, K], B: f32[K, N]) -> C: f32[M - 1, N]:
    C[m, n] = sum[k](A[m, k] * B[k, n])
""")
    a, b = torch.randn(5, 3), torch.randn(3, 4)
    torch.testing.assert_close(evaluate(op, A=a, B=b), a[:-1] @ b)


@pytest.mark.parametrize("text", [
    "op f(X: f32[M]) -> Y: f32[N]:\n    Y[i] = X[i]\n",          # unrelated symbols
    "op f(X: f32[N]) -> Y: f32[N + 1]:\n    Y[i] = X[i]\n",      # output longer than the input
])
def test_mismatched_extents_are_still_rejected(text):
    with pytest.raises(OdlError, match="extent"):
        parse(text)


# ---- 2. Symbols that appear only in affine input extents (X: f32[2*H]) could not be bound
# from the tensors, so evaluate() failed with "sizes missing"; non-pure extents were never
# checked against the given shapes either.


def test_symbol_bound_from_an_affine_extent():
    op = parse(GLU)
    x = torch.randn(3, 10)
    torch.testing.assert_close(evaluate(op, X=x), torch.nn.functional.glu(x, dim=-1))
    assert bind_sizes(op, {"X": (3, 10)}) == {"R": 3, "C": 5}


def test_affine_extent_that_does_not_divide_is_refused():
    with pytest.raises(ShapeError, match="2\\*C"):
        evaluate(parse(GLU), X=torch.randn(3, 7))


def test_affine_extent_checked_against_the_given_shape():
    op = parse("op f(X: f32[M, M + 1]) -> Y: f32[M]:\n    Y[i] = X[i, i + 1]\n")
    with pytest.raises(ShapeError, match="M \\+ 1"):
        evaluate(op, X=torch.randn(3, 5))
    torch.testing.assert_close(evaluate(op, X=torch.eye(3, 4)), torch.zeros(3))
