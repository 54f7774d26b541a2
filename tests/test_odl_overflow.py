"""Index and size arithmetic cannot overflow: with the sizes bound, every index expression,
flattened offset, extent, tensor size, loop space and integer value made of indices is checked
against the kernels' integer type (int64 in C and the reference, int32 in Triton); what can
leave it is an OdlError at its line and column (odl/overflow.py)."""

from __future__ import annotations

import pytest
import torch

import uol_core
from uol_core.acg.fixtures import runnable_target
from uol_core.odl import OdlError, parse
from uol_core.odl.errors import IndexOverflowError
from uol_core.odl.overflow import INT32, check_index_arithmetic
from uol_core.odl.shapes import ShapeError, bind_sizes
from uol_core.runtime.reference import evaluate_all

TARGET = runnable_target()  # a fixed target: no host probe

# The reproducer: C computed 2**62 * i in int64 (undefined past i = 1), gcc cut the loop
# short and Y[2..15] came back as stale memory.
REPRODUCER = "op o(X: f32[N]) -> Y: f32[N]:\n    Y[i] = pad(X[4611686018427387904 * i], 0)\n"


def odl_error(text: str, sizes: dict) -> IndexOverflowError:
    with pytest.raises(IndexOverflowError) as caught:
        bind_sizes(parse(text), sizes)
    return caught.value


def test_the_reproducer_is_an_odl_error_at_the_index_expression() -> None:
    err = odl_error(REPRODUCER, {"N": 16})
    assert (err.line, err.column) == (2, 18)  # the index expression inside X[...]
    assert "4611686018427387904*i" in err.message and "int64" in err.message
    assert "N=16" in err.message and "\n" not in str(err)
    assert isinstance(err, OdlError) and isinstance(err, ShapeError)  # other sizes may fit
    err.source = REPRODUCER
    assert err.render().splitlines()[-2].strip() == "^"


@pytest.mark.parametrize("backend", ["c", "reference"])
def test_no_backend_runs_the_reproducer(backend: str) -> None:
    with pytest.raises(OdlError, match="2:18"):
        uol_core.compile(REPRODUCER, {"N": 16}, TARGET, backend)
    with pytest.raises(OdlError, match="2:18"):
        evaluate_all(parse(REPRODUCER), {"X": torch.ones(16)})


def test_the_reproducer_compiles_where_its_index_fits() -> None:
    """At N=2 the largest index is 2**62: in range, and padded as the language says."""
    x = torch.arange(1.0, 3.0)
    got = uol_core.compile(REPRODUCER, {"N": 2}, TARGET, "c")(X=x)
    assert got.tolist() == [1.0, 0.0]
    assert evaluate_all(parse(REPRODUCER), {"X": x})["Y"].tolist() == [1.0, 0.0]


def test_a_large_but_safe_index_compiles_and_agrees_with_the_reference() -> None:
    text = ("op far(X: f32[N]) -> Y: f32[N]:\n"
            "    Y[i] = pad(X[1099511627776 * i], 7) + pad(X[N - 1 - 1000000007 * i], -1)\n")
    x = torch.arange(1.0, 17.0)
    got = uol_core.compile(text, {"N": 16}, TARGET, "c")(X=x)
    assert torch.equal(got, evaluate_all(parse(text), {"X": x})["Y"])
    assert got[0] == 1.0 + 16.0 and got[1] == 7.0 - 1.0


@pytest.mark.parametrize(("text", "sizes", "where", "says"), [
    # a shape's extent: 2**62 f32 elements are 2**64 bytes
    ("op s(X: f32[4611686018427387904 * N]) -> Y: f32[N]:\n    Y[i] = X[i]\n",
     {"N": 1}, (1, 13), "bytes"),
    # a shape expression's own arithmetic: N + 2**62 leaves int64 while N - 2**62 is 1
    ("op s(X: f32[N - 4611686018427387904]) -> Y: f32[N - 4611686018427387904]:\n"
     "    Y[i] = X[i]\n",
     {"N": 4611686018427387905}, (1, 13), "extent"),
    # a flattened offset: row 2**62 of a two-column tensor is element 2**63
    ("op f(X: f32[M, N]) -> Y: f32[N]:\n    Y[j] = pad(X[4611686018427387904, j], 0)\n",
     {"M": 3, "N": 2}, (2, 16), "offset"),
    # a negative coefficient and offset
    ("op g(X: f32[N]) -> Y: f32[N]:\n"
     "    Y[i] = pad(X[-4611686018427387904 * i - 4611686018427387904], 0)\n",
     {"N": 2}, (2, 18), "index"),
    # index arithmetic in a value: a where's comparison computes 2**62 * i
    ("op w(X: f32[N]) -> Y: f32[N]:\n"
     "    Y[i] = where(4611686018427387904 * i > 0, X[i], 0.0)\n",
     {"N": 3}, (2, 18), "integer expression"),
    # an integer reduction of index values: 30 factors up to 30
    ("op p(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] * f32(prod[j: N](j + 1))\n",
     {"N": 30}, (2, 23), "prod"),
], ids=["shape-bytes", "shape-arithmetic", "offset", "negative", "where", "prod"])
def test_overflowing_arithmetic_names_its_line_and_column(text, sizes, where, says) -> None:
    err = odl_error(text, sizes)
    assert (err.line, err.column) == where, err
    assert says in err.message


def test_the_same_ops_compile_at_sizes_where_they_fit() -> None:
    text = "op f(X: f32[M, N]) -> Y: f32[N]:\n    Y[j] = pad(X[4611686018427387904, j], 0)\n"
    assert bind_sizes(parse(text), {"M": 3, "N": 1}) == {"M": 3, "N": 1}
    factorial = "op p(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] * f32(prod[j: N](j + 1))\n"
    got = uol_core.compile(factorial, {"N": 10}, TARGET, "c")(X=torch.ones(10))
    assert got.tolist() == [3628800.0] * 10


def test_triton_kernels_are_held_to_int32() -> None:
    """2**30 * i is fine in int64 but wraps in Triton's int32 indices (at i = 4 it read X[0]):
    the Triton backend refuses it, the C backend runs it."""
    text = "op o(X: f32[N]) -> Y: f32[N]:\n    Y[i] = pad(X[1073741824 * i], 0)\n"
    op = parse(text)
    with pytest.raises(IndexOverflowError, match="int32") as caught:
        uol_core.compile(text, {"N": 16}, TARGET, "triton")
    assert (caught.value.line, caught.value.column) == (2, 18)
    x = torch.arange(1.0, 17.0)
    assert uol_core.compile(text, {"N": 16}, TARGET, "c")(X=x).tolist() == [1.0] + [0.0] * 15
    check_index_arithmetic(op, {"N": 2}, INT32)  # 2**30 fits int32


def test_library_ops_fit_at_large_sizes() -> None:
    """A 65536 x 65536 f32 matrix (16 GiB) is in range for C; past 2**31 elements it is not for
    Triton."""
    op = uol_core.api.load_any("softmax")
    check_index_arithmetic(op, {"R": 65536, "C": 65536})
    with pytest.raises(IndexOverflowError, match="elements"):
        check_index_arithmetic(op, {"R": 65536, "C": 65536}, INT32)
