"""The GEMM family's plans, recognised from the IR for every backend.

`lower_contraction` lowers a whole op that is one contraction followed by maps to a GemmPlan
(index roles, extents, operand accesses and the fused epilogue): the one fact sheet the GEMM
space, the cost model and the C templates read. `matmul_plan` recognises one contraction
statement of an op (which reduction, its two operands and constant factor, the index roles)
for the Triton matmul kernel, which also takes several per op and windowed operands. Both hold
IR nodes (never text), so every stage stays on the one IR.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import (
    Access,
    Binary,
    Cast,
    Const,
    DType,
    Expr,
    Op,
    Reduce,
    Scan,
    Stmt,
    children,
    walk,
)
from uol_core.odl.pad_reach import padded_escapes
from uol_core.odl.patterns import classify, classify_stmt
from uol_core.odl.shapes import shape_of


class UnsupportedOp(ValueError):
    """The op is outside what this backend path generates (says what is missing and why)."""


@dataclass(frozen=True)
class GemmPlan:
    """C[batch, m, n] = epilogue(sum[k](A[.., m, k] * B[.., k, n]), other reads) with sizes bound."""

    op: Op
    sizes: dict[str, int]
    main: int  # index of the contraction statement
    lhs: Access  # the A access (rows m, depth k)
    rhs: Access  # the B access (depth k, columns n)
    m: str
    n: str
    k: str
    batch: tuple[str, ...]
    reduce: Reduce
    stmts: tuple[Stmt, ...]  # main statement then fused map statements, in order
    stores: tuple[str, ...]  # targets written to memory (outputs), in statement order
    dtype: DType = DType.f32
    extents: dict[str, int] = field(default_factory=dict)

    @property
    def M(self) -> int:
        return self.extents[self.m]

    @property
    def N(self) -> int:
        return self.extents[self.n]

    @property
    def K(self) -> int:
        return self.extents[self.k]

    @property
    def batch_count(self) -> int:
        count = 1
        for name in self.batch:
            count *= self.extents[name]
        return count

    @property
    def flops(self) -> int:
        return 2 * self.batch_count * self.M * self.N * self.K

    @property
    def epilogue_ops(self) -> tuple[str, ...]:
        return classify(self.op).main_statement.epilogue

    def tensor_shape(self, name: str) -> tuple[int, ...]:
        return shape_of(self.op, name, self.sizes)


def lower_contraction(op: Op, sizes: Mapping[str, int]) -> GemmPlan:
    """The GemmPlan of a contraction op, or UnsupportedOp naming what the C path cannot do yet."""
    pattern = classify(op)
    if pattern.kind != "contraction":
        raise UnsupportedOp(f"{op.name} is a {pattern.kind}; the C GEMM path needs a contraction")
    main = pattern.main
    roles = pattern.main_statement.contraction
    stmt = op.stmts[main]
    if roles.windowed:
        raise UnsupportedOp(f"line {stmt.line}: windowed operands (convolution) are not a GEMM yet")
    if len(roles.m) != 1 or len(roles.n) != 1 or len(roles.k) != 1:
        raise UnsupportedOp(f"line {stmt.line}: the GEMM path needs exactly one m, n and k index "
                            f"(got m={roles.m}, n={roles.n}, k={roles.k})")
    reduces = [x for x in walk(stmt.expr) if isinstance(x, Reduce)]
    if len(reduces) != 1:
        raise UnsupportedOp(f"line {stmt.line}: one reduction per GEMM statement")
    reduce = reduces[0]
    accesses = [a for a in walk(reduce.body) if isinstance(a, Access)]
    lhs = next(a for a in accesses if a.tensor == roles.lhs)
    rhs = next(a for a in accesses if a.tensor == roles.rhs)
    for acc in (lhs, rhs):
        if any(f.pure_symbol is None for f in acc.indices):
            raise UnsupportedOp(f"line {stmt.line}: {acc.tensor} must be indexed by plain names")
    dtypes = {d.dtype for d in op.inputs + op.outputs + op.locals}
    if dtypes != {DType.f32}:
        raise UnsupportedOp(f"{op.name}: the C GEMM path is f32 only (found "
                            f"{', '.join(sorted(d.value for d in dtypes))})")
    stmts = [stmt]
    free = set(stmt.indices)
    for i in pattern.epilogues:
        later = op.stmts[i]
        if set(later.indices) != free or any(isinstance(x, Reduce) for x in walk(later.expr)):
            raise UnsupportedOp(f"line {later.line}: a fused statement must be a map over "
                                f"{', '.join(stmt.indices)}")
        stmts.append(later)
    if len(stmts) != len(op.stmts) - main or main != 0:
        raise UnsupportedOp(f"{op.name}: only one contraction followed by maps fuses into one kernel")
    escapes = padded_escapes(op, sizes)
    if escapes:
        raise UnsupportedOp(f"line {op.stmts[escapes[0].statement].line}: "
                            f"{escapes[0].describe()}; the GEMM template loads without bounds "
                            "tests, the generic kernel honours pad()")
    extents = {name: form.evaluate(dict(sizes))
               for name, form in stmt_extents(op, main).free.items()}
    extents.update({name: form.evaluate(dict(sizes))
                    for name, form in stmt_extents(op, main).reductions[reduce].items()})
    outputs = {d.name for d in op.outputs}
    stores = tuple(s.target for s in stmts if s.target in outputs)
    m, n = roles.m[0], roles.n[0]
    if stmt.indices and stmt.indices[-1] == m:
        # The output is contiguous along m: make it the micro-kernel's vector (n) axis so that
        # tiles store whole rows (a*b == b*a, so swapping the operands changes no value).
        m, n, lhs, rhs = n, m, rhs, lhs
    return GemmPlan(op, dict(sizes), main, lhs, rhs, m, n, roles.k[0],
                    roles.batch, reduce, tuple(stmts), stores, DType.f32, extents)


def epilogue_reads(plan: GemmPlan) -> list[Access]:
    """Every tensor read outside the reduction (bias, residual), in order of appearance."""
    found: list[Access] = []
    for stmt in plan.stmts:
        for node in _walk_outside_reduce(stmt.expr):
            if isinstance(node, Access) and node not in found:
                found.append(node)
    return found


def _walk_outside_reduce(expr: Expr):
    if isinstance(expr, Reduce):
        return
    yield expr
    for child in children(expr):
        yield from _walk_outside_reduce(child)


@dataclass(frozen=True)
class MatmulPlan:
    """Which reduction is the GEMM, its operands and constant factor, and the index roles."""

    node: Reduce
    lhs: Access
    rhs: Access
    scale: float
    m: tuple[str, ...]
    n: tuple[str, ...]
    k: tuple[str, ...]
    batch: tuple[str, ...]
    epilogue: bool


def _factors(expr) -> list:
    if isinstance(expr, Binary) and expr.op == "mul":
        return _factors(expr.lhs) + _factors(expr.rhs)
    if isinstance(expr, Cast):
        return _factors(expr.operand)
    return [expr]


def matmul_plan(op: Op, index: int) -> MatmulPlan | None:
    """A plan when statement `index` is a contraction every free index of which has a role."""
    pattern = classify_stmt(op, index)
    roles = pattern.contraction
    stmt = op.stmts[index]
    if pattern.kind != "contraction" or roles is None:
        return None
    reduces = [n for n in walk(stmt.expr) if isinstance(n, (Reduce, Scan))]
    node = next((n for n in reduces if isinstance(n, Reduce) and n.indices == roles.k), None)
    if node is None or len(reduces) != 1:
        return None
    if set(roles.m + roles.n + roles.batch) != set(stmt.indices):
        return None
    factors = _factors(node.body)
    accesses = [f for f in factors if isinstance(f, Access)]
    consts = [f for f in factors if isinstance(f, Const)]
    if len(accesses) != 2 or len(accesses) + len(consts) != len(factors):
        return None
    lhs, rhs = (accesses if accesses[0].tensor == roles.lhs else accesses[::-1])
    scale = 1.0
    for c in consts:
        scale *= float(c.value)
    return MatmulPlan(node, lhs, rhs, scale, roles.m, roles.n, roles.k, roles.batch,
                      stmt.expr is not node)
