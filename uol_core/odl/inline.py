"""Fold a chain of same-index statements into one (entry point `inline_maps`).

The graph's fusion planner merges a convolution with the maps after it (bias, relu, a residual
add) into one op of several statements: the contraction writes a local, each map reads the one
before it at the same element. A template that recognises one statement with an epilogue
(`Y[...] = epi(sum(...), reads)`) takes such an op once the locals are substituted into the last
statement. Substitution keeps the arithmetic and its order; only the intermediate's round trip
through memory goes (a C compiler may then contract a multiply and a later add into one FMA).
"""

from __future__ import annotations

from uol_core.odl.derivatives import rebuild
from uol_core.odl.ir import Access, Expr, Op, Reduce, Scan, Stmt, children, walk


def inline_maps(op: Op) -> Op:
    """`op` as one statement when that is exact, else `op` itself. Exact when every statement
    writes at the same free indices, every statement but the last writes a local of the
    output's dtype, later statements read those locals only at exactly those indices, and a
    local holding a reduction is read once (a second read would compute the reduction twice)."""
    if len(op.stmts) < 2 or len(op.outputs) != 1 or op.stmts[-1].target != op.outputs[0].name:
        return op
    locals_ = {d.name: d for d in op.locals}
    first = op.stmts[0]
    dtype = op.outputs[0].dtype
    defined: dict[str, Expr] = {}
    for stmt in op.stmts:
        if stmt.indices != first.indices or stmt.extents not in ((), first.extents):
            return op
        if stmt is not op.stmts[-1] and (stmt.target not in locals_ or locals_[stmt.target].dtype != dtype):
            return op
        reads = [n for n in walk(stmt.expr) if isinstance(n, Access) and n.tensor in defined]
        inside = [n for r in _reductions(stmt.expr) for n in walk(r.body)
                  if isinstance(n, Access) and n.tensor in defined]
        if inside or any(not _at(read, stmt.indices) for read in reads):
            return op  # a local read inside a reduction would be recomputed at every step
        defined[stmt.target] = _replace(stmt.expr, defined)
    if any(stmt.target in locals_ and not _read_later(op, i) for i, stmt in enumerate(op.stmts[:-1])):
        return op  # a local nobody reads: keep the op as written
    last = op.stmts[-1]
    if _reduction_count(defined[last.target]) != sum(_reduction_count(s.expr) for s in op.stmts):
        return op  # a local holding a reduction is read twice: it would be computed twice
    merged = Stmt(last.target, first.indices, defined[last.target], last.line, first.extents)
    return Op(op.name, op.inputs, op.outputs, (merged,), (), op.line, op.source)


def _at(read: Access, indices: tuple[str, ...]) -> bool:
    """Whether `read` is `t[i, j, ...]` at exactly the statement's own indices, unpadded."""
    return read.pad is None and tuple(form.pure_symbol for form in read.indices) == indices


def _reductions(expr: Expr):
    """The outermost reductions and scans of `expr`."""
    if isinstance(expr, (Reduce, Scan)):
        yield expr
        return
    for child in children(expr):
        yield from _reductions(child)


def _reduction_count(expr: Expr) -> int:
    return sum(isinstance(n, (Reduce, Scan)) for n in walk(expr))


def _replace(expr: Expr, defined: dict[str, Expr]) -> Expr:
    if isinstance(expr, Access) and expr.tensor in defined:
        return defined[expr.tensor]
    return rebuild(expr, lambda child: _replace(child, defined))


def _read_later(op: Op, i: int) -> bool:
    target = op.stmts[i].target
    return any(isinstance(n, Access) and n.tensor == target
               for stmt in op.stmts[i + 1:] for n in walk(stmt.expr))
