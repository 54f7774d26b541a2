"""FLOP and byte counts of an operator at concrete sizes: the inputs of every roofline."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

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
    Unary,
    Var,
    children,
    walk,
)

# Each arithmetic node, comparison and named function counts as one operation per value of the
# indices it depends on; a reduction adds one combine per reduced element (so matmul is 2*M*N*K, the
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
        scope = {i: extents.free[i].evaluate(sizes) for i in stmt.indices}
        points = math.prod(scope.values())
        reduce_extents = {node: {n: e.evaluate(sizes) for n, e in ext.items()}
                          for node, ext in extents.reductions.items()}
        flops = _count(stmt.expr, scope, reduce_extents)
        read = {n.tensor for n in _accesses(stmt.expr)}
        per_stmt.append(StmtCost(stmt.target, flops, points,
                                 sum(nbytes(t) for t in read), nbytes(stmt.target)))
    compulsory = sum(nbytes(d.name) for d in op.inputs + op.outputs)
    unfused = sum(s.bytes_read + s.bytes_written for s in per_stmt)
    return OpCost(sum(s.flops for s in per_stmt), compulsory, unfused, tuple(per_stmt))


# The HFL peak a contraction of two tensors of a type runs at: bf16 and f16 products go to
# the matrix or dot-product units (AMX, VDPBF16PS, tensor cores), whose peak the HFL records
# under these keys; every other type computes in f32 or f64 vector arithmetic.
_MATRIX_PEAKS = {DType.bf16: "bf16", DType.f16: "fp16"}


def peak_dtype(op: Op) -> str:
    """The HFL peak (`peak_gflops.<key>`) the op's arithmetic is measured against: "bf16" or
    "fp16" when a sum of products reads two tensors of that type (a GEMM or convolution on
    them), "fp64" when a float tensor is f64 (the op computes in double), else "fp32" (bf16
    elementwise work is widened to f32). A target without that peak falls back to fp32
    (`uol_core.hfl.roofline.peak_key`)."""
    types = {d.name: d.dtype for d in op.inputs + op.outputs + op.locals}
    for stmt in op.stmts:
        for node in walk(stmt.expr):
            if isinstance(node, Reduce) and node.op == "sum" and isinstance(node.body, Binary) \
                    and node.body.op == "mul" and isinstance(node.body.lhs, Access) \
                    and isinstance(node.body.rhs, Access):
                pair = {types[node.body.lhs.tensor], types[node.body.rhs.tensor]}
                if len(pair) == 1 and (key := _MATRIX_PEAKS.get(pair.pop())):
                    return key
    return "fp64" if DType.f64 in types.values() else "fp32"


def _accesses(expr: Expr):
    if isinstance(expr, Access):
        yield expr
    for child in children(expr):
        yield from _accesses(child)


def _count(expr: Expr, scope: dict[str, int], reduce_extents: dict[Reduce, dict[str, int]]) -> int:
    """Operations to evaluate `expr`, each node once per value of the indices it depends on
    (a loop-invariant row sum inside an element statement counts once per row, as compiled)."""
    if isinstance(expr, (Const, Var, Access)):
        return 0
    if isinstance(expr, Cast):
        return _count(expr.operand, scope, reduce_extents)
    if isinstance(expr, Reduce):
        inner = {**scope, **reduce_extents.get(expr, {})}
        points = _points(expr.body, inner)
        combine = points + (_points(expr, scope) if expr.op == "mean" else 0)
        return _count(expr.body, inner, reduce_extents) + combine
    own_points = _points(expr, scope)
    if isinstance(expr, Scan):
        return _count(expr.body, scope, reduce_extents) + own_points
    own = 0 if isinstance(expr, Unary) and expr.op == "neg" else own_points
    return own + sum(_count(c, scope, reduce_extents) for c in children(expr))


def _points(expr: Expr, scope: dict[str, int]) -> int:
    """How many distinct values of the in-scope indices `expr` depends on."""
    return math.prod(scope[name] for name in free_indices(expr) & scope.keys())


def free_indices(expr: Expr) -> set[str]:
    """Index and dimension names an expression reads, minus those its reductions bind."""
    if isinstance(expr, Var):
        return {expr.name}
    if isinstance(expr, Access):
        return {name for form in expr.indices for name in form.symbols}
    names: set[str] = set()
    for child in children(expr):
        names |= free_indices(child)
    if isinstance(expr, Reduce):
        names -= set(expr.indices)
    if isinstance(expr, Scan):
        names.add(expr.index)
    return names
