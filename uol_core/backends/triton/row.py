"""Fused row kernels (softmax, layernorm, rmsnorm, cross-entropy): one program per row, in registers.

Applies when every statement shares the leading "row" indices and every reduction runs over the
whole trailing "column" space: each row is loaded once into a BLOCK_C tile and all statements,
intermediates included, are computed without going back to memory.

Rows longer than the target allows in one tile (`row_block_limit`: registers per thread x
threads) take a looped variant, chosen at launch by the constexpr LOOPED: each reduction is a
loop over BLOCK_C chunks of the row (one pass per reduction), wide intermediates are recomputed
per chunk instead of stored, and a last pass computes and stores the wide outputs.
"""

from __future__ import annotations

from typing import Any

from uol_core.backends.triton.expr import (
    COMBINE,
    REDUCE_INIT,
    REDUCE_TILE,
    Ctx,
    ExprEmitter,
    Writer,
    product_code,
    safe,
)
from uol_core.backends.triton.generic import KernelPart, acc_dtype, store_dtype, tensors_of
from uol_core.odl.ir import Access, Affine, Op, Reduce, Var, walk
from uol_core.plans.rows import RowSplit, row_split

LIVE_TILES = 4  # row tiles a fused row kernel keeps live at once (input, intermediates, output)


def row_block_limit(target: Any = None, num_warps: int = 4) -> int:
    """Longest row (a power of two) one program keeps in registers on `target`.

    Each of the num_warps * warp_size threads holds BLOCK_C / threads elements of every live
    tile; LIVE_TILES tiles must fit the registers a thread may use (255 when unknown).
    """
    regs = int(getattr(target, "registers_per_thread_max", 0) or 255)
    warp = int(getattr(target, "warp_size", 0) or 32)
    per_thread = max(1, (regs - 32) // LIVE_TILES)
    per_thread = 1 << (per_thread.bit_length() - 1)
    return max(256, per_thread * warp * max(1, int(num_warps)))


# The row kernel renders the shared row split (plans/rows.py).
RowPlan = RowSplit
row_plan = row_split


def loopable(op: Op, plan: RowPlan) -> bool:
    """Every reduction body reads only its row and its own reduction indices (it can be hoisted
    out of the statement into a loop over row chunks)."""
    nr = len(plan.rows)
    dims = set(op.dims)
    for stmt in op.stmts:
        for node in walk(stmt.expr):
            if not isinstance(node, Reduce):
                continue
            ok = set(stmt.indices[:nr]) | set(node.indices) | dims
            for x in walk(node.body):
                names = [x.name] if isinstance(x, Var) else \
                    [n for f in x.indices for n in f.symbols] if isinstance(x, Access) else []
                if not set(names) <= ok:
                    return False
    return True


def emit_row(op: Op, plan: RowPlan, cfg: dict) -> KernelPart:
    """The fused kernel: load the row tile, evaluate each statement in registers, store outputs.

    When the op can loop, the kernel also holds the looped variant for rows longer than
    `MAX_BLOCK_C` (a constexpr `if LOOPED` picks one at launch; the other is never compiled).
    """
    stmts = list(range(len(op.stmts)))
    tensors = tensors_of(op, stmts)
    params = [f"{safe(t)}_ptr" for t in tensors] + [safe(d) for d in op.dims]
    w = Writer(set(params) | {"BLOCK_C", "LOOPED"})
    ctot = product_code(list(plan.cols))
    looped = loopable(op, plan)
    w.odl_line = op.stmts[0].line
    if looped:
        row = w.fresh("row")
        w.emit(f"{row} = tl.program_id(0)")
        w.emit("if LOOPED:")
        w.depth += 1
        w.emit("# one program per row; the row is longer than one tile: BLOCK_C chunks, "
               "one pass per reduction")
        _looped_body(op, plan, w, row)
        w.depth -= 1
        w.odl_line = op.stmts[0].line
        w.emit("else:")
        w.depth += 1
        _tile_body(op, plan, w, row)
        w.depth -= 1
    else:
        _tile_body(op, plan, w, None)
    lines, odl = w.text()
    outputs = {d.name for d in op.outputs}
    stored = [t for t in tensors if t in outputs or t in {d.name for d in op.inputs}]
    limit = int(cfg.get("MAX_BLOCK_C") or row_block_limit(None, cfg.get("num_warps", 4)))
    consts = {"BLOCK_C": f"triton.next_power_of_2({ctot})"}
    if looped:
        consts = {"BLOCK_C": f"min(triton.next_power_of_2({ctot}), {limit})",
                  "LOOPED": f"triton.next_power_of_2({ctot}) > {limit}"}
    return KernelPart(f"{op.name}_rows", stored, consts,
                      f"({product_code(list(plan.rows))},)", lines, odl, stmts, "row",
                      launch_opts={"num_warps": str(cfg.get("num_warps", 4))})


def _tile_body(op: Op, plan: RowPlan, w: Writer, row: str | None) -> None:
    """The whole row in one BLOCK_C tile: load once, every statement in registers."""
    stmts = list(range(len(op.stmts)))
    outputs = {d.name for d in op.outputs}
    dt = acc_dtype(op)
    ctot = product_code(list(plan.cols))
    cols, cmask = w.fresh("cols"), w.fresh("col_mask")
    w.odl_line = op.stmts[0].line
    w.emit("# one program per row; the whole row lives in one BLOCK_C tile")
    if row is None:
        row = w.fresh("row")
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


class _LoopEmitter(ExprEmitter):
    """Reads of wide intermediates are recomputed in the current chunk (they are never stored)."""

    def __init__(self, op: Op, w: Writer, dt: str, reduce_rule, wide: dict) -> None:
        super().__init__(op, w, dt, reduce_rule)
        self.wide = wide

    def load(self, a: Access, ctx: Ctx) -> str:
        if a.tensor in ctx.regs or a.tensor not in self.wide:
            return super().load(a, ctx)
        stmt = self.wide[a.tensor]
        sub = ctx.child(cache=ctx.cache)
        for name, form in zip(stmt.indices, a.indices):
            sub.idx[name] = ctx.idx[form.pure_symbol]
        value = self.expr(stmt.expr, sub)
        var = self.w.fresh(stmt.target.lower() if stmt.target.lower() != stmt.target
                           else stmt.target + "v")
        self.w.emit(f"{var} = tl.zeros([BLOCK_C], {self.acc_dtype}) + {value}")
        ctx.regs[a.tensor] = var  # the chunk's registers: computed once per chunk
        return var


def _looped_body(op: Op, plan: RowPlan, w: Writer, row: str) -> None:
    """Reductions as loops over BLOCK_C chunks (hoisted out of their statements), row scalars in
    registers, wide intermediates recomputed per chunk, a last pass for the wide outputs."""
    outputs = {d.name for d in op.outputs}
    dt = acc_dtype(op)
    ctot = product_code(list(plan.cols))
    nr = len(plan.rows)

    def chunk(names: tuple[str, ...]) -> tuple[str, str, list[str]]:
        start = w.fresh("c_start")
        w.emit(f"for {start} in range(0, {ctot}, BLOCK_C):")
        w.depth += 1
        cols, cmask = w.fresh("cols"), w.fresh("col_mask")
        w.emit(f"{cols} = {start} + tl.arange(0, BLOCK_C)")
        w.emit(f"{cmask} = {cols} < {ctot}")
        return cols, cmask, em.decompose(cols, names, list(plan.cols))

    def loop_reduce(em_: ExprEmitter, node: Reduce, ctx: Ctx) -> str:
        init = REDUCE_INIT[node.op]
        acc = w.fresh(f"{node.op}_acc")
        w.emit(f"{acc} = tl.full([BLOCK_C], {init}, {dt})")
        _, cmask, cvars = chunk(node.indices)
        inner = Ctx(["BLOCK_C"], dict(ctx.idx), [(cmask, 0)], dict(ctx.regs), {})
        for name, var in zip(node.indices, cvars):
            inner.idx[name] = (var, 0)
        body = em_.expr(node.body, inner)
        val = w.fresh("val")
        w.emit(f"{val} = tl.where({cmask}, tl.zeros([BLOCK_C], {dt}) + {body}, {init})")
        w.emit(f"{acc} = " + COMBINE[node.op].format(acc, val))
        w.depth -= 1
        out = w.fresh(f"{node.op}_row")
        red = f"{REDUCE_TILE[node.op]}({acc}, axis=0)"
        w.emit(f"{out} = ({red} / ({ctot}))" if node.op == "mean" else f"{out} = {red}")
        return out

    wide: dict = {}
    em = _LoopEmitter(op, w, dt, loop_reduce, wide)
    row_vars = em.decompose(row, op.stmts[0].indices[:nr], list(plan.rows))
    regs: dict[str, str] = {}
    for i, stmt in enumerate(op.stmts):
        em.stmt_index = i
        w.odl_line = stmt.line
        w.emit(f"# ODL line {stmt.line}: {stmt.target}[{', '.join(stmt.indices)}]")
        ctx = Ctx(["BLOCK_C"], regs=regs)
        for name, var in zip(stmt.indices[:nr], row_vars):
            ctx.idx[name] = (var, None)
        for node in walk(stmt.expr):
            if isinstance(node, Reduce):
                em.overrides[id(node)] = em.expr(node, ctx)
        if len(stmt.indices) > nr:
            wide[stmt.target] = stmt
            continue
        value = em.expr(stmt.expr, ctx)
        var = w.fresh(stmt.target.lower() if stmt.target.lower() != stmt.target
                      else stmt.target + "v")
        w.emit(f"{var} = {value}")
        regs[stmt.target] = var
        if stmt.target in outputs:
            off, _ = em.offset(stmt.target, tuple(Affine.of(x) for x in stmt.indices), ctx)
            ptr = f"{safe(stmt.target)}_ptr + {off}" if off != "0" else f"{safe(stmt.target)}_ptr"
            w.emit(f"tl.store({ptr}, {var}.to({store_dtype(op, stmt.target)}))")
    stores = [s for s in op.stmts if s.target in outputs and s.target in wide]
    if not stores:
        return
    w.odl_line = stores[0].line
    w.emit("# last pass: the wide outputs, chunk by chunk")
    _, cmask, cvars = chunk(stores[0].indices[nr:])
    loop_regs = dict(regs)
    for stmt in stores:
        w.odl_line = stmt.line
        ctx = Ctx(["BLOCK_C"], masks=[(cmask, 0)], regs=loop_regs)
        for name, var in zip(stmt.indices[:nr], row_vars):
            ctx.idx[name] = (var, None)
        for name, var in zip(stmt.indices[nr:], cvars):
            ctx.idx[name] = (var, 0)
        target = Access(stmt.target, tuple(Affine.of(x) for x in stmt.indices))
        var = em.load(target, ctx)
        off, _ = em.offset(stmt.target, target.indices, ctx)
        w.emit(f"tl.store({safe(stmt.target)}_ptr + {off}, "
               f"{var}.to({store_dtype(op, stmt.target)}), mask={cmask})")
    w.depth -= 1
