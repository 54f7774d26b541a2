"""Peak memory of verifying one op: its tensors plus the reference evaluator's intermediates.

The reference evaluator (runtime/reference.py) builds each statement with torch: a broadcast
tensor per expression node, a full body for a reduction that is not a contraction, index
tensors for a gather, and every local at its full extent. Counting only the declared inputs
and outputs let an op pass a 64 MiB budget and then peak at gigabytes; this bound counts the
intermediates the same way the evaluator makes them (every node's result alive at once, so
it errs on the safe side).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from uol_core.odl.check import stmt_extents
from uol_core.odl.errors import ShapeError
from uol_core.odl.ir import Access, Binary, Call, Cast, DType, Expr, Op, Reduce, Scan, Unary, Var
from uol_core.odl.shapes import shape_of

INDEX_BYTES = 8  # gathers index with int64 tensors


def _product_factors(expr: Expr) -> list[Expr]:
    if isinstance(expr, Binary) and expr.op == "mul":
        return _product_factors(expr.lhs) + _product_factors(expr.rhs)
    return [expr]


class _Walk:
    """Sums the bytes of every tensor the evaluator makes for one statement."""

    def __init__(self, extents: dict[str, int], reductions: dict, sizes: Mapping[str, int],
                 itemsize: int) -> None:
        self.extents = dict(extents)
        self.reductions = reductions
        self.sizes = sizes
        self.itemsize = itemsize
        self.bytes = 0

    def elements(self, axes: set[str]) -> int:
        return math.prod(self.extents[a] for a in axes)

    def axes(self, expr: Expr, scope: set[str]) -> set[str]:
        """The scope axes `expr` varies along; adds the bytes of the tensors it makes."""
        if isinstance(expr, Var):
            return {expr.name} & scope
        if isinstance(expr, Access):
            used = {name for form in expr.indices for name, _ in form.terms} & scope
            pures = [form.pure_symbol for form in expr.indices]
            if expr.pad is not None or None in pures or len(set(pures)) != len(pures):
                count = self.elements(used)  # a gather: index tensors, mask and result
                self.bytes += count * (INDEX_BYTES * (len(expr.indices) + 1) + self.itemsize)
            return used
        if isinstance(expr, (Unary, Cast)):
            return self.made(self.axes(expr.operand, scope))
        if isinstance(expr, Binary):
            return self.made(self.axes(expr.lhs, scope) | self.axes(expr.rhs, scope))
        if isinstance(expr, Call):
            return self.made(set().union(*(self.axes(a, scope) for a in expr.args)))
        if isinstance(expr, Scan):
            return self.made(self.axes(expr.body, scope) | {expr.index})
        if isinstance(expr, Reduce):
            return self.reduce(expr, scope)
        return set()  # a constant

    def made(self, axes: set[str]) -> set[str]:
        self.bytes += self.elements(axes) * self.itemsize
        return axes

    def reduce(self, expr: Reduce, scope: set[str]) -> set[str]:
        for name in expr.indices:
            self.extents[name] = self.reductions[expr][name].evaluate(self.sizes)
        inner = scope | set(expr.indices)
        factors = _product_factors(expr.body)
        if expr.op == "sum" and len(factors) >= 2:  # einsum: the factors, never their product
            used = set().union(*(self.axes(f, inner) for f in factors))
        else:  # the body is expanded over every reduction axis before it is reduced
            used = self.axes(expr.body, inner) | set(expr.indices)
            self.bytes += self.elements(used) * self.itemsize
        return self.made(used - set(expr.indices))


def peak_bytes(op: Op, sizes: Mapping[str, int]) -> int:
    """Declared tensors + locals + the largest statement's intermediates, in bytes."""
    declared = sum(math.prod(shape_of(op, d.name, sizes)) * d.dtype.itemsize
                   for d in op.inputs + op.outputs)
    types = {d.dtype for d in op.inputs + op.outputs + op.locals}
    itemsize = 8 if DType.f64 in types else 4
    kept, working = 0, 0
    for index, stmt in enumerate(op.stmts):
        ext = stmt_extents(op, index)
        free = {name: ext.free[name].evaluate(sizes) for name in stmt.indices}
        walk = _Walk(free, ext.reductions, sizes, itemsize)
        walk.made(walk.axes(stmt.expr, set(stmt.indices)) | set(stmt.indices))  # expanded
        kept += math.prod(free.values()) * itemsize  # the statement's target stays in the env
        working = max(working, walk.bytes)
    return declared + kept + working


def memory_budget_bytes() -> int:
    """Bytes the tensors of one kernel may use: $UOL_MEM_BUDGET_MB, else a quarter of RAM."""
    if os.environ.get("UOL_MEM_BUDGET_MB"):
        return int(float(os.environ["UOL_MEM_BUDGET_MB"]) * 2**20)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4


def check_memory(op: Op, sizes: Mapping[str, int]) -> None:
    """Raise ShapeError when verifying the op (its tensors and the reference evaluator's
    intermediates) would exceed the memory budget."""
    total = peak_bytes(op, sizes)
    budget = memory_budget_bytes()
    if total > budget:
        raise ShapeError(f"{op.name} at {dict(sizes)} needs {total / 2**20:.0f} MiB (tensors and "
                         f"the reference's intermediates), over the budget of "
                         f"{budget / 2**20:.0f} MiB (set UOL_MEM_BUDGET_MB)")
