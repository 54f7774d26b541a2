"""Fused row kernels (softmax, layernorm, rmsnorm, cross-entropy): one program per row, in registers.

Applies when every statement shares the leading "row" indices and every reduction runs over the
whole trailing "column" space: each row is loaded once into a BLOCK_C tile and all statements,
intermediates included, are computed without going back to memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from uol_core.backends.triton_expr import (
    REDUCE_INIT,
    REDUCE_TILE,
    Ctx,
    ExprEmitter,
    Writer,
    product_code,
    safe,
)
from uol_core.backends.triton_generic import KernelPart, acc_dtype, store_dtype, tensors_of
from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import Access, Affine, Op, Reduce, Scan, children, walk

ROW_REDUCTIONS = ("sum", "mean", "max", "min")


@dataclass(frozen=True)
class RowPlan:
    """Extents of the row indices (one program each) and of the column tile."""

    rows: tuple[Affine, ...]
    cols: tuple[Affine, ...]


def _free(op: Op, i: int) -> list[Affine]:
    ext = stmt_extents(op, i).free
    return [ext[n] for n in op.stmts[i].indices]


def row_plan(op: Op) -> RowPlan | None:
    """The row/column split when the whole op fits one fused row kernel, else None."""
    n = len(op.stmts)
    frees = [_free(op, i) for i in range(n)]
    reduces = [[x for x in walk(s.expr) if isinstance(x, Reduce)] for s in op.stmts]
    if any(isinstance(x, Scan) for s in op.stmts for x in walk(s.expr)):
        return None
    with_red = [i for i in range(n) if reduces[i]]
    if not with_red:
        return None
    nr = min(len(frees[i]) for i in with_red)
    rows = frees[with_red[0]][:nr]
    wide = [tuple(f[nr:]) for f in frees if len(f) > nr]
    cols = wide[0] if wide else tuple(stmt_extents(op, with_red[0]).reductions[reduces[with_red[0]][0]].values())
    if not cols or any(f[:nr] != rows or (len(f) > nr and tuple(f[nr:]) != cols) for f in frees):
        return None
    defined = {s.target: len(f) for s, f in zip(op.stmts, frees)}
    for i, stmt in enumerate(op.stmts):
        for node in reduces[i]:
            ext = stmt_extents(op, i).reductions[node]
            if node.op not in ROW_REDUCTIONS or tuple(ext[k] for k in node.indices) != cols:
                return None
            if any(isinstance(x, (Reduce, Scan)) for x in walk(node.body) if x is not node):
                return None
        rnames = stmt.indices[:nr]
        own_cols = stmt.indices[nr:] if len(stmt.indices) > nr else None
        if not _reads_ok(stmt.expr, rnames, own_cols, defined, nr):
            return None
    return RowPlan(tuple(rows), tuple(cols))


def _reads_ok(expr, rnames, cnames, defined: dict[str, int], nr: int) -> bool:
    """Reads of earlier statements' tensors must be at this row and the current column lane."""
    if isinstance(expr, Access) and expr.tensor in defined:
        want = [Affine.of(r) for r in rnames]
        if defined[expr.tensor] > nr:
            if cnames is None:
                return False
            want += [Affine.of(c) for c in cnames]
        return expr.pad is None and list(expr.indices) == want
    if isinstance(expr, Reduce):
        return _reads_ok(expr.body, rnames, expr.indices, defined, nr)
    return all(_reads_ok(c, rnames, cnames, defined, nr) for c in children(expr))


def emit_row(op: Op, plan: RowPlan, cfg: dict) -> KernelPart:
    """The fused kernel: load the row tile, evaluate each statement in registers, store outputs."""
    stmts = list(range(len(op.stmts)))
    tensors = tensors_of(op, stmts)
    outputs = {d.name for d in op.outputs}
    params = [f"{safe(t)}_ptr" for t in tensors] + [safe(d) for d in op.dims]
    w = Writer(set(params) | {"BLOCK_C"})
    dt = acc_dtype(op)
    ctot = product_code(list(plan.cols))
    row, cols, cmask = w.fresh("row"), w.fresh("cols"), w.fresh("col_mask")
    w.odl_line = op.stmts[0].line
    w.emit("# one program per row; the whole row lives in one BLOCK_C tile")
    w.emit(f"{row} = tl.program_id(0)")
    w.emit(f"{cols} = tl.arange(0, BLOCK_C)")
    w.emit(f"{cmask} = {cols} < {ctot}")
    nr = len(plan.rows)

    def row_reduce(em: ExprEmitter, node: Reduce, ctx: Ctx) -> str:
        inner = ctx.child(cache=ctx.cache)  # a tile reduction, not a loop: loads can be shared
        for name, var in zip(node.indices, col_vars):
            inner.idx[name] = (var, 0)
        body = em.expr(node.body, inner)
        init = REDUCE_INIT[node.op]
        val = em.w.fresh("val")
        em.w.emit(f"{val} = tl.where({cmask}, tl.zeros([BLOCK_C], {dt}) + {body}, {init})")
        out = f"{REDUCE_TILE[node.op]}({val}, axis=0)"
        return f"({out} / ({ctot}))" if node.op == "mean" else out

    em = ExprEmitter(op, w, dt, row_reduce)
    # Row and column variables are named once (after the first statement that binds them) and
    # shared, so identical loads in different statements are recognised and done once.
    first_wide = next((s for s in op.stmts if len(s.indices) > nr), None)
    first_red = next(x for s in op.stmts for x in walk(s.expr) if isinstance(x, Reduce))
    col_names = first_wide.indices[nr:] if first_wide else first_red.indices
    col_vars = em.decompose(cols, col_names, list(plan.cols))
    row_vars = em.decompose(row, op.stmts[0].indices[:nr], list(plan.rows))
    regs: dict[str, str] = {}
    cache: dict[str, str] = {}
    for i in stmts:
        stmt = op.stmts[i]
        em.stmt_index = i
        w.odl_line = stmt.line
        w.emit(f"# ODL line {stmt.line}: {stmt.target}[{', '.join(stmt.indices)}]")
        ctx = Ctx(["BLOCK_C"], masks=[(cmask, 0)], regs=regs, cache=cache)
        for name, var in zip(stmt.indices[:nr], row_vars):
            ctx.idx[name] = (var, None)
        wide = len(stmt.indices) > nr
        if wide:
            for name, var in zip(stmt.indices[nr:], col_vars):
                ctx.idx[name] = (var, 0)
        value = em.expr(stmt.expr, ctx)
        var = w.fresh(stmt.target.lower() if stmt.target.lower() != stmt.target
                      else stmt.target + "v")
        w.emit(f"{var} = tl.zeros([BLOCK_C], {dt}) + {value}" if wide else f"{var} = {value}")
        regs[stmt.target] = var
        if stmt.target in outputs:
            off, _ = em.offset(stmt.target, tuple(Affine.of(x) for x in stmt.indices), ctx)
            ptr = f"{safe(stmt.target)}_ptr + {off}" if off != "0" else f"{safe(stmt.target)}_ptr"
            cast = f"{var}.to({store_dtype(op, stmt.target)})"
            w.emit(f"tl.store({ptr}, {cast}, mask={cmask})" if wide else f"tl.store({ptr}, {cast})")
    lines, odl = w.text()
    stored = [t for t in tensors if t in outputs or t in {d.name for d in op.inputs}]
    return KernelPart(f"{op.name}_rows", stored, {"BLOCK_C": f"triton.next_power_of_2({ctot})"},
                      f"({product_code(list(plan.rows))},)", lines, odl, stmts, "row",
                      launch_opts={"num_warps": str(cfg.get("num_warps", 4))})
