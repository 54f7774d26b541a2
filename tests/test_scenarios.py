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

from uol_core.backends.c_native import compile_c
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
    for name in list_ops():
        op = load_op(name)
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


@pytest.mark.parametrize(("name", "shape", "dtype", "backend"), SCENARIOS)
def test_scenario(name: str, shape: str, dtype: str, backend: str) -> None:
    op = load_op(name)
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
        kernel = compile_c(op, sizes)
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
