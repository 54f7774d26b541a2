"""FLOP and byte counts of an operator at concrete sizes: the inputs of every roofline."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import Access, Call, Cast, Const, Expr, Op, Reduce, Scan, Unary, Var, children

# Each arithmetic node, comparison and named function counts as one operation per point it is
# evaluated at; a reduction adds one combine per reduced element (so matmul is 2*M*N*K, the
# usual convention), a mean one division per result.


@dataclass(frozen=True)
class StmtCost:
    """Work of one statement."""

    target: str
    flops: int
    points: int  # elements written
    bytes_read: int  # distinct tensors read, each once
    bytes_written: int


@dataclass(frozen=True)
class OpCost:
    """Work and compulsory memory traffic of an op (intermediates fused away)."""

    flops: int
    bytes: int
    unfused_bytes: int
    statements: tuple[StmtCost, ...]

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per byte of compulsory traffic."""
        return self.flops / self.bytes if self.bytes else math.inf

    def to_dict(self) -> dict:
        return {"flops": self.flops, "bytes": self.bytes, "unfused_bytes": self.unfused_bytes,
                "intensity": self.intensity,
                "statements": [s.__dict__ for s in self.statements]}


def op_cost(op: Op, sizes: Mapping[str, int]) -> OpCost:
    """FLOPs and bytes of `op` with dimension sizes `sizes` (e.g. {'M': 64, 'N': 32, 'K': 16})."""
    sizes = dict(sizes)

    def numel(name: str) -> int:
        return math.prod(f.evaluate(sizes) for f in op.tensor(name).shape)

    def nbytes(name: str) -> int:
        return numel(name) * op.tensor(name).dtype.itemsize

    per_stmt = []
    for index, stmt in enumerate(op.stmts):
        extents = stmt_extents(op, index)
        points = math.prod(extents.free[i].evaluate(sizes) for i in stmt.indices)
        reduce_sizes = {node: math.prod(e.evaluate(sizes) for e in ext.values())
                        for node, ext in extents.reductions.items()}
        flops = _count(stmt.expr, points, reduce_sizes)
        read = {n.tensor for n in _accesses(stmt.expr)}
        per_stmt.append(StmtCost(stmt.target, flops, points,
                                 sum(nbytes(t) for t in read), nbytes(stmt.target)))
    compulsory = sum(nbytes(d.name) for d in op.inputs + op.outputs)
    unfused = sum(s.bytes_read + s.bytes_written for s in per_stmt)
    return OpCost(sum(s.flops for s in per_stmt), compulsory, unfused, tuple(per_stmt))


def _accesses(expr: Expr):
    if isinstance(expr, Access):
        yield expr
    for child in children(expr):
        yield from _accesses(child)


def _count(expr: Expr, points: int, reduce_sizes: dict[Reduce, int]) -> int:
    """Operations to evaluate `expr` at `points` iteration points."""
    if isinstance(expr, (Const, Var, Access, Cast)):
        inner = _count(expr.operand, points, reduce_sizes) if isinstance(expr, Cast) else 0
        return inner
    if isinstance(expr, Reduce):
        inner_points = points * reduce_sizes.get(expr, 1)
        combine = inner_points + (points if expr.op == "mean" else 0)
        return _count(expr.body, inner_points, reduce_sizes) + combine
    if isinstance(expr, Scan):
        return _count(expr.body, points, reduce_sizes) + points
    own = 0 if isinstance(expr, Unary) and expr.op == "neg" else points
    if isinstance(expr, Call) and expr.fn == "where":
        own = points
    return own + sum(_count(c, points, reduce_sizes) for c in children(expr))
