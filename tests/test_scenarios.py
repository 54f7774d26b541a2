"""Scenario matrix: every library operator x shapes x dtypes x backends, checked against the reference.

Shapes: all ones, small primes, and odd sizes that are multiples of no tile size. Backends:
the C backend (templates or the generic path), the Triton interpreter, and the reference itself
at f32 against f64 (its own numerical stability). UOL_FULL=1 adds larger shapes.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

from uol_core.acg.fixtures import runnable_target
from uol_core.backends.c.native import compile_c
from uol_core.odl import parse
from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import DType, Op, retyped
from uol_core.odl.shapes import ShapeError, bind_sizes
from uol_core.ops import list_ops, load_op
from uol_core.runtime.inputs import random_inputs
from uol_core.runtime.reference import evaluate_all
from uol_core.runtime.verify import compare

FULL = os.environ.get("UOL_FULL") == "1"
# Per shape class: the value cycle for ordinary dimensions and the value for filter-like ones
# (symbols subtracted in a shape, e.g. R in H - R + 1).
SHAPES = {"ones": ([1], 1), "primes": ([7, 5, 3, 11], 2), "odd": ([19, 9, 13, 6, 17], 3)}
if FULL:
    SHAPES["large"] = ([257, 131, 67, 45], 3)
WORK_LIMIT = 4_000_000 if FULL else 300_000  # loop iterations the reference may spend per scenario
# Inputs wider than the output along a reduced axis, or read over a prefix: every backend
# reduces over the whole axis an index reads (or the extent written for it), as the reference
# does (docs/odl.md, "Extents"); templates that cannot honour it leave the op to generic paths.
ATTENTION_TAIL = ("    mx[i] = max[j](s[i, j])\n    p[i, j] = exp(s[i, j] - mx[i])\n"
                  "    l[i] = sum[j](p[i, j])\n    O[i, e] = sum[j](p[i, j] * V[j, e]) / l[i]\n")
WIDER = {
    "wide_log_softmax": "op wide_log_softmax(X: f32[R, C + 3]) -> Y: f32[R, C]:\n"
                        "    mx[r] = max[c](X[r, c])\n"
                        "    lse[r] = log(sum[c](exp(X[r, c] - mx[r])))\n"
                        "    Y[r, c] = X[r, c] - mx[r] - lse[r]\n",
    "wide_softmax": "op wide_softmax(X: f32[R + 1, C + 2]) -> Y: f32[R, C]:\n"
                    "    mx[r] = max[c](X[r, c])\n    e[r, c] = exp((X[r, c] - mx[r]) * 0.5)\n"
                    "    Y[r, c] = e[r, c] / sum[c](e[r, c])\n",
    "wide_layernorm": "op wide_layernorm(X: f32[R, C + 2], g: f32[C + 4]) -> Y: f32[R, C]:\n"
                      "    mu[r] = mean[c](X[r, c])\n"
                      "    var[r] = mean[c]((X[r, c] - mu[r]) * (X[r, c] - mu[r]))\n"
                      "    Y[r, c] = (X[r, c] - mu[r]) * rsqrt(var[r] + 1e-5) * g[c]\n",
    "wide_row_sum_prefix": "op wide_row_sum_prefix(X: f32[R, C + 3]) -> Y: f32[R]:\n"
                           "    Y[r] = sum[c: C](X[r, c]) + max[c](X[r, c])\n",
    "wide_matmul_k": "op wide_matmul_k(A: f32[M, K + 2], B: f32[K + 2, N]) -> Y: f32[M, N]:\n"
                     "    Y[m, n] = sum[k](A[m, k] * B[k, n])\n",
    "wide_matmul_bias": "op wide_matmul_bias(A: f32[M + 1, K], B: f32[K, N + 3], b: f32[N + 3])"
                        " -> Y: f32[M, N]:\n    Y[m, n] = relu(sum[k](A[m, k] * B[k, n]) + b[n])\n",
    "wide_matmul_prefix_k": "op wide_matmul_prefix_k(A: f32[M, K + 2], B: f32[K + 3, N]) -> "
                            "Y: f32[M, N]:\n    Y[m, n] = sum[k: K](A[m, k] * B[k, n])\n",
    "wide_attention_query": "op wide_attention_query(Q: f32[S + 3, D], K: f32[T, D], V: f32[T, E])"
                            " -> O: f32[S, E]:\n"
                            "    s[i, j] = sum[d](Q[i, d] * K[j, d]) * 0.125\n" + ATTENTION_TAIL,
    "wide_attention_values": "op wide_attention_values(Q: f32[S, D], K: f32[T, D + 1], "
                             "V: f32[T, E + 2]) -> O: f32[S, E]:\n"
                             "    s[i, j] = sum[d: D](Q[i, d] * K[j, d]) * 0.125\n"
                             + ATTENTION_TAIL,
    "wide_matvec": "op wide_matvec(A: f32[M + 2, K + 1], x: f32[K + 1]) -> Y: f32[M]:\n"
                   "    Y[m] = sum[k](A[m, k] * x[k])\n",
    "wide_conv_channels": "op wide_conv_channels(X: f32[N, C + 2, H, W], F: f32[K, C + 2, R, S]) "
                          "-> Y: f32[N, K, H - R + 1, W - S + 1]:\n"
                          "    Y[n, k, h, w] = sum[c, r, s](X[n, c, h + r, w + s] * F[k, c, r, s])\n",
    "wide_col_cumsum": "op wide_col_cumsum(X: f32[R + 2, C + 1]) -> (Y: f32[C], Z: f32[R, C]):\n"
                       "    Y[c] = sum[r](X[r, c])\n    Z[r, c] = cumsum[c](X[r, c])\n",
}


def scenario_op(name: str) -> Op:
    """A library operator, or one of the wider-input cases above."""
    return parse(WIDER[name]) if name in WIDER else load_op(name)


def scenario_sizes(op: Op, shape: str) -> dict[str, int] | None:
    """Concrete sizes of one shape class, grown until every extent is legal; None if too big."""
    cycle, small = SHAPES[shape]
    negative = {n for d in op.inputs + op.outputs for f in d.shape for n, c in f.terms if c < 0}
    sizes = {d: small if d in negative else cycle[i % len(cycle)] for i, d in enumerate(op.dims)}
    for _ in range(6):
        try:
            bind_sizes(op, sizes)
            break
        except ShapeError:
            sizes = {d: v + 2 for d, v in sizes.items()}
    else:
        return None
    return sizes if work(op, sizes) <= WORK_LIMIT else None


def work(op: Op, sizes: dict[str, int]) -> int:
    """Loop iterations of the op's statements (free x reduction extents)."""
    total = 0
    for i in range(len(op.stmts)):
        ext = stmt_extents(op, i)
        free = math.prod(f.evaluate(sizes) for f in ext.free.values())
        reds = [math.prod(f.evaluate(sizes) for f in r.values()) for r in ext.reductions.values()]
        total += free * max([1, *reds])
    return total


def _scenarios() -> list:
    cases = []
    for name in [*list_ops(), *WIDER]:
        op = scenario_op(name)
        for shape in SHAPES:
            sizes = scenario_sizes(op, shape)
            if sizes is None:
                continue
            cases.append(pytest.param(name, shape, "f32", "c", id=f"c-{name}-{shape}-f32"))
            if shape != "ones":
                cases.append(pytest.param(name, shape, "f64", "c", id=f"c-{name}-{shape}-f64"))
            if shape == "primes":
                for half in ("f16", "bf16"):
                    cases.append(pytest.param(name, shape, half, "c", id=f"c-{name}-{shape}-{half}"))
                cases.append(pytest.param(name, shape, "f32", "reference",
                                          id=f"reference-{name}-{shape}-f32"))
                cases.append(pytest.param(name, shape, "f32", "triton",
                                          id=f"triton-{name}-{shape}-f32"))
    return cases


SCENARIOS = _scenarios()


def test_matrix_is_large_enough() -> None:
    assert len(SCENARIOS) >= 200
    shapes = {p.values[1] for p in SCENARIOS}
    assert {"ones", "primes", "odd"} <= shapes
    wider = {(p.values[0], p.values[3]) for p in SCENARIOS if p.values[0] in WIDER}
    assert wider == {(name, b) for name in WIDER for b in ("c", "reference", "triton")}


@pytest.mark.parametrize(("name", "shape", "dtype", "backend"), SCENARIOS)
def test_scenario(name: str, shape: str, dtype: str, backend: str) -> None:
    op = scenario_op(name)
    if dtype != "f32":
        op = retyped(op, DType(dtype))
    sizes = scenario_sizes(op, shape)
    inputs = random_inputs(op, sizes, seed=7)
    if dtype == "f64":
        inputs = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    reference = evaluate_all(op, inputs)
    if not all(torch.isfinite(v).all() for v in reference.values() if v.is_floating_point()):
        # e.g. a variance input drawn negative: use positive data, as the op's domain expects.
        inputs = {k: v.abs() + 0.1 if v.is_floating_point() else v for k, v in inputs.items()}
        reference = evaluate_all(op, inputs)
    if backend == "c":
        # the wider cases on a target with vector math, so the row template gets its chance
        kernel = compile_c(op, sizes, runnable_target() if name in WIDER else None)
        verdict = compare(kernel.run(inputs), reference, kernel.src.meta["reduction_length"])
        assert verdict.ok, f"{name} {sizes} {dtype}: {verdict}\n{kernel.src.text}"
    elif backend == "reference":
        # f32 evaluation stays within f32 tolerance of the f64 evaluation (a stable reference).
        wide = retyped(op, DType.f64)
        exact = evaluate_all(wide, {k: v.double() if v.is_floating_point() else v
                                    for k, v in inputs.items()})
        got = {k: v.double() for k, v in reference.items()}
        verdict = compare({k: v.float() for k, v in got.items()},
                          {k: v.float() for k, v in exact.items()}, work(op, sizes))
        assert verdict.ok, f"{name}: {verdict}"
    else:
        pytest.importorskip("triton")
        from uol_core.backends.triton import emit as triton_emit
        from uol_core.runtime.triton_runner import verify

        result = verify(triton_emit(op, {}), op, inputs)
        assert result.ok, f"{name} {sizes}: {result.max_error}"
