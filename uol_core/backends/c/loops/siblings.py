"""Sibling reductions of the generic C path: consecutive statements of a pass that each reduce
one row of the same length, none reading another's result inside its reduction, share one
accumulator loop (entry points `sibling_runs` and `emit_siblings`).

A layer norm's backward reduces every row three times (dY * (X - mu) * gamma, X - mu, and
dY * gamma) before it writes dX: three loops over the row become one, with three accumulators.
What each statement does after its reduction (d_mu adds d_var's share) runs after the loop, in
statement order, so later statements read the finished results of earlier ones.
"""

from __future__ import annotations

from collections.abc import Mapping

from uol_core.backends.c.text.expr import (
    REDUCE_C,
    ExprContext,
    kind,
    outer_reduces,
    reduced_value,
    render,
    render_as,
    store,
)
from uol_core.backends.c.text.names import index_id
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.odl.ir import Access, Op, Reduce, Scan, walk


def _row_reduction(op: Op, lay, i: int, depth: int, cfg: Mapping) -> tuple[Reduce, int, ExprContext] | None:
    """Statement i's one float reduction over one index of a row, when it has that shape: all
    its own indices are the pass's shared loops, no scan, no reduction inside the reduction."""
    stmt = op.stmts[i]
    if len(stmt.indices) != depth or any(isinstance(n, Scan) for n in walk(stmt.expr)):
        return None
    reds = outer_reduces(stmt.expr)
    if len(reds) != 1 or len(reds[0].indices) != 1 or reds[0].op not in REDUCE_C:
        return None
    red = reds[0]
    if any(isinstance(n, Reduce) for n in walk(red.body) if n is not red):
        return None
    ctx = lay.context(i, cfg)
    if not ctx.simd or kind(red, ctx) != "f":
        return None
    return red, ctx.reductions[red][red.indices[0]], ctx


def sibling_runs(op: Op, lay, stmts: list[int], depth: int, cfg: Mapping,
                 riders: set[int] = frozenset()) -> list[list[int]]:
    """`stmts` (a pass's statements, in order) cut into runs: two or more siblings share a
    run, every other statement (a column rider among them) is a run of its own."""
    runs: list[list[int]] = []
    extent, written, names, summed = None, set(), {}, set()
    for i in stmts:
        found = _row_reduction(op, lay, i, depth, cfg) if depth and i not in riders else None
        joins = False
        if found is not None and runs and extent == found[1]:
            red, own = found[0], op.stmts[i].indices
            reads_earlier = any(isinstance(n, Access) and n.tensor in written
                                for n in walk(red.body))
            # one C name per index in the shared block: a row index of one statement may not
            # be another's reduction index, nor sit at another loop depth
            clash = (any(names.get(n, p) != p for p, n in enumerate(own))
                     or red.indices[0] in names or bool(set(own) & summed))
            joins = not reads_earlier and not clash
        if joins:
            runs[-1].append(i)
        else:
            runs.append([i])
            extent, written, names, summed = (found[1] if found else None), set(), {}, set()
        if found is not None:
            written.add(op.stmts[i].target)
            names.update({n: p for p, n in enumerate(op.stmts[i].indices)})
            summed.add(found[0].indices[0])
        else:
            extent = None
    return runs


def emit_siblings(w: CodeWriter, op: Op, lay, run: list[int], depth: int, pad: str, cfg: Mapping) -> None:
    """One accumulator loop for the run's reductions, then each statement's store in order."""
    stmts = [op.stmts[i] for i in run]
    line = stmts[0].line
    w.emit(f"{pad}{{ /* lines {', '.join(str(s.line) for s in stmts)}: "
           f"{', '.join(s.target for s in stmts)}, sibling reductions in one loop */", line)
    inner = pad + "    "
    declared: set[str] = set()
    for stmt in stmts:
        for p, name in enumerate(stmt.indices[:depth]):
            if name not in declared:
                declared.add(name)
                w.emit(f"{inner}const int64_t {index_id(name)} = o{p};", stmt.line)
    parts = []
    for n, i in enumerate(run):
        red, extent, ctx = _row_reduction(op, lay, i, depth, cfg)
        inits, update, omp = REDUCE_C[red.op]
        acc = f"sib{n + 1}"
        body = render_as(ctx, red.body, "f")
        assert not ctx.pre, "a sibling's reduction body needs no loops of its own"
        ctx.cache[id(red)] = reduced_value(red, acc, extent, ctx.real)
        parts.append((i, red, ctx, acc, body, update, omp))
        w.emit(f"{inner}{ctx.real} {acc} = {inits['f']};", op.stmts[i].line)
    clauses = " ".join(f"reduction({omp}:{acc})" for _, _, _, acc, _, _, omp in parts)
    w.emit(f"{inner}#pragma omp simd {clauses}", line)
    w.emit(f"{inner}for (int64_t sib = 0; sib < {extent}; ++sib) {{", line)
    aliased: set[str] = set()
    for i, red, _, acc, body, update, _ in parts:
        name = red.indices[0]
        if name not in aliased:
            aliased.add(name)
            w.emit(f"{inner}    const int64_t {index_id(name)} = sib;", op.stmts[i].line)
        w.emit(f"{inner}    {update.format(a=acc, v=body)}", op.stmts[i].line)
    w.emit(f"{inner}}}", line)
    for i, _, ctx, _, _, _, _ in parts:
        stmt = op.stmts[i]
        value = render(stmt.expr, ctx)
        assert not ctx.pre, "a sibling's reduction renders as its accumulator"
        decl = op.tensor(stmt.target)
        if stmt.target in {d.name for d in op.outputs} or not decl.dtype.is_float:
            value = store(decl.dtype, value, kind(stmt.expr, ctx))
        target = lay.address(stmt.target, [index_id(n) for n in stmt.indices])
        w.emit(f"{inner}{target} = {value};", stmt.line)
    w.emit(f"{pad}}}", line)
