"""One extent per index, one answer per op: a reduction over an index the output does not bind
runs over the whole axis it reads (docs/odl.md, "Extents"), in the reference, the C backend
and the Triton backend alike; templates that cannot honour a read of part of an axis leave the
op to the generic paths."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

import uol_core
from uol_core.acg.fixtures import runnable_target
from uol_core.backends.c.rows import emitter as c_rows
from uol_core.odl import OdlError, parse
from uol_core.odl.prefix_reads import prefix_reads
from uol_core.odl.shapes import ShapeError, bind_sizes
from uol_core.ops import load_op
from uol_core.plans import attention_plan, softmax_rows
from uol_core.runtime.reference import evaluate_all

TARGET = runnable_target()
# The op: the C row template reduced over C columns, the reference over C + 999.
LSM = """op lsm(X: f32[R, C + 999]) -> Y: f32[R, C]:
    mx[r] = max[c](X[r, c])
    lse[r] = log(sum[c](exp(X[r, c] - mx[r])))
    Y[r, c] = X[r, c] - mx[r] - lse[r]
"""
SOFTMAX = """op sm(X: f32[R, C + 999]) -> Y: f32[R, C]:
    mx[r] = max[c](X[r, c])
    e[r, c] = exp(X[r, c] - mx[r])
    Y[r, c] = e[r, c] / sum[c](e[r, c])
"""
# The flash templates took S from Q and wrote S + 3 rows into O's S (a heap overrun).
WIDE_QUERY = """op wq(Q: f32[S + 3, D], K: f32[T, D], V: f32[T, D]) -> O: f32[S, D]:
    s[i, j] = sum[d](Q[i, d] * K[j, d]) * 0.125
    mx[i] = max[j](s[i, j])
    p[i, j] = exp(s[i, j] - mx[i])
    l[i] = sum[j](p[i, j])
    O[i, e] = sum[j](p[i, j] * V[j, e]) / l[i]
"""
BACKENDS = ["reference", "c", "triton"]


def run(text: str, backend: str, **tensors: torch.Tensor) -> torch.Tensor:
    if backend == "triton":
        pytest.importorskip("triton")
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    return uol_core.compile(text, shapes, TARGET, backend)(**tensors)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("text", "whole_row"), [
    (LSM, lambda x: torch.log_softmax(x, dim=1)), (SOFTMAX, lambda x: torch.softmax(x, dim=1))],
    ids=["log_softmax", "softmax"])
def test_a_reduction_the_output_does_not_bind_runs_over_the_whole_axis(text, whole_row, backend):
    x = torch.randn(3, 5 + 999, generator=torch.Generator().manual_seed(3)) * 4
    got = run(text, backend, X=x)
    assert got.shape == (3, 5)
    torch.testing.assert_close(got, whole_row(x)[:, :5], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_attention_over_a_wider_query_agrees_with_the_reference(backend: str) -> None:
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(n, 4, generator=gen) for n in (3 + 3, 6, 6))
    got = run(WIDE_QUERY, backend, Q=q, K=k, V=v)
    expected = torch.softmax(q[:3] @ k.T * 0.125, dim=1) @ v
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_a_written_extent_reduces_over_a_prefix() -> None:
    text = LSM.replace("max[c]", "max[c: C]").replace("sum[c]", "sum[c: C]")
    x = torch.randn(2, 5 + 999, generator=torch.Generator().manual_seed(4))
    expected = torch.log_softmax(x[:, :5], dim=1)
    for backend in ("reference", "c"):
        torch.testing.assert_close(run(text, backend, X=x), expected, atol=1e-5, rtol=1e-4)


def test_templates_leave_reads_of_part_of_an_axis_to_the_generic_paths() -> None:
    lsm, wide_query = parse(LSM), parse(WIDE_QUERY)
    found = prefix_reads(lsm)
    assert [(r.access.tensor, r.axis, str(r.extent)) for r in found] == [("X", 1, "C")]
    assert softmax_rows(lsm) is None and c_rows.row_plan(lsm) is None
    assert attention_plan(wide_query) is None
    # the library's own forms still take their templates
    assert not prefix_reads(load_op("log_softmax")) and c_rows.row_plan(load_op("log_softmax"))
    assert attention_plan(load_op("attention")) is not None
    source = uol_core.compile(LSM, {"R": 2, "C": 3}, TARGET, "c").source
    assert "uol-c-generic" in source.splitlines()[0]


def test_axes_of_different_extents_ask_which_one_is_meant() -> None:
    text = ("op two(X: f32[R, C + 1], Z: f32[R, C]) -> Y: f32[R]:\n"
            "    Y[r] = max[c](X[r, c] + Z[r, c])\n")
    with pytest.raises(OdlError) as caught:
        parse(text)
    err = caught.value
    assert (err.line, err.column) == (2, 12)
    assert "C + 1 from X (axis 1) but C from Z (axis 1)" in err.message
    assert "max[c: C](...)" in err.hint
    assert parse(text.replace("max[c]", "max[c: C]")).name == "two"  # said which: accepted


def test_a_written_extent_that_leaves_no_element_is_a_shape_error() -> None:
    """max over no element has no value (the reference raised IndexError, C gave -inf)."""
    op = parse("op m(X: f32[R, C]) -> Y: f32[R]:\n    Y[r] = max[c: C - 1](X[r, c])\n")
    assert bind_sizes(op, {"R": 2, "C": 2}) == {"R": 2, "C": 2}
    with pytest.raises(ShapeError, match=r"max\[c: C - 1\] \(line 2\) runs over 0 elements"):
        evaluate_all(op, {"X": torch.ones(2, 1)})
