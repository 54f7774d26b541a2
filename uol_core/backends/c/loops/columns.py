"""Column reductions in generated C: y[c] = f(sum[r](body)) with rows outside and the columns
contiguous (vectorised) inside — what the backward of every norm and bias needs."""

from __future__ import annotations

import math

from uol_core.acg.fusion import column_reduce
from uol_core.backends.c.text.expr import (
    REDUCE_C,
    ExprContext,
    kind,
    render,
    store,
)
from uol_core.backends.c.text.names import index_id
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.odl.ir import Op, Reduce

COLUMN_BLOCK = 2048  # most columns one thread accumulates at a time in a column reduction
COLUMN_SPLIT_MIN = 128  # columns per thread from which a column reduction splits the columns


def column_reduction(w: CodeWriter, op: Op, lay, stmt, ctx: ExprContext, red: Reduce,
                      col: str, extent: int, pad: str, threads: int) -> None:
    """A column sum y[c] = f(red[r..](body)): rows in the outer loop, the columns contiguous in
    the inner (vectorised) loop, accumulating into a row of accumulators. With enough columns
    each thread owns column blocks (no combining); else each thread sums a block of rows into
    its own partial row and the partial rows are combined at the end."""
    line = stmt.line
    k = kind(red, ctx)
    body_kind = "f" if k == "f" else "i"
    ctype = ctx.ctype(body_kind)
    inits, update, _ = REDUCE_C[red.op]
    c = index_id(col)
    extents = ctx.reductions[red]
    names = list(red.indices)
    rows = math.prod(extents[n] for n in names)
    body = render(red.body, ctx)
    if body_kind == "f" and kind(red.body, ctx) != "f":
        body = f"(({ctx.real})({body}))"
    assert not ctx.pre, "a column reduction has no nested reductions"
    vacc, part = ctx.fresh("vacc"), ctx.fresh("part")
    by_columns = threads == 1 or extent >= threads * COLUMN_SPLIT_MIN or rows < 2 * threads

    def result(acc: str) -> str:
        ctx.cache[id(red)] = f"({acc} / ({ctx.real}){rows})" if red.op == "mean" else acc
        value = render(stmt.expr, ctx)
        decl = op.tensor(stmt.target)
        if stmt.target in {d.name for d in op.outputs} or not decl.dtype.is_float:
            value = store(decl.dtype, value, kind(stmt.expr, ctx))
        return f"{lay.address(stmt.target, [c])} = {value};"

    def row_loops(at: str) -> str:
        for name in names:
            ident = index_id(name)
            w.emit(f"{at}for (int64_t {ident} = 0; {ident} < {extents[name]}; ++{ident}) {{", line)
            at += "    "
        return at

    def close_rows(at: str) -> str:
        for _ in names:
            at = at[:-4]
            w.emit(f"{at}}}", line)
        return at

    w.emit(f"{pad}/* column reduction: rows outside, columns inside; "
           f"{'column blocks per thread' if by_columns else 'row blocks per thread, partial rows combined'} */",
           line)
    if by_columns:
        block = min(COLUMN_BLOCK, -(-extent // threads))
        block = min(extent, -(-block // 16) * 16)
        w.emit(f"{pad}#pragma omp parallel num_threads({threads})\n{pad}{{", line)
        at = pad + "    "
        w.emit(f"{at}{ctype} *restrict {vacc} = malloc(sizeof({ctype}) * {block});", line)
        w.emit(f"{at}#pragma omp for schedule(static)", line)
        w.emit(f"{at}for (int64_t cb = 0; cb < {extent}; cb += {block}) {{", line)
        at += "    "
        w.emit(f"{at}const int64_t ce = cb + {block} < {extent} ? cb + {block} : {extent};", line)
        w.emit(f"{at}#pragma omp simd\n{at}for (int64_t {c} = cb; {c} < ce; ++{c}) "
               f"{vacc}[{c} - cb] = {inits[body_kind]};", line)
        at = row_loops(at)
        w.emit(f"{at}#pragma omp simd\n{at}for (int64_t {c} = cb; {c} < ce; ++{c})", line)
        w.emit(f"{at}    {update.format(a=f'{vacc}[{c} - cb]', v=body)}", line)
        at = close_rows(at)
        w.emit(f"{at}for (int64_t {c} = cb; {c} < ce; ++{c})", line)
        w.emit(f"{at}    {result(f'{vacc}[{c} - cb]')}", line)
        at = at[:-4]
        w.emit(f"{at}}}\n{at}free({vacc});", line)
        w.emit(f"{pad}}}", line)
        return
    w.emit(f"{pad}{ctype} *restrict {part} = malloc(sizeof({ctype}) * {threads * extent});", line)
    w.emit(f"{pad}#pragma omp parallel num_threads({threads})\n{pad}{{", line)
    at = pad + "    "
    w.emit(f"{at}{ctype} *restrict {vacc} = {part} + (int64_t)omp_get_thread_num() * {extent};", line)
    w.emit(f"{at}const int nt = omp_get_num_threads();", line)
    w.emit(f"{at}#pragma omp simd\n{at}for (int64_t {c} = 0; {c} < {extent}; ++{c}) "
           f"{vacc}[{c}] = {inits[body_kind]};", line)
    collapse = f" collapse({len(names)})" if len(names) > 1 else ""
    w.emit(f"{at}#pragma omp for{collapse} schedule(static)", line)
    at = row_loops(at)
    w.emit(f"{at}#pragma omp simd\n{at}for (int64_t {c} = 0; {c} < {extent}; ++{c})", line)
    w.emit(f"{at}    {update.format(a=f'{vacc}[{c}]', v=body)}", line)
    at = close_rows(at)
    w.emit(f"{at}#pragma omp for schedule(static)", line)
    w.emit(f"{at}for (int64_t {c} = 0; {c} < {extent}; ++{c}) {{", line)
    acc = ctx.fresh("acc")
    w.emit(f"{at}    {ctype} {acc} = {part}[{c}];", line)
    w.emit(f"{at}    for (int t = 1; t < nt; ++t)", line)
    w.emit(f"{at}        {update.format(a=acc, v=f'{part}[(int64_t)t * {extent} + {c}]')}", line)
    w.emit(f"{at}    {result(acc)}", line)
    w.emit(f"{at}}}", line)
    w.emit(f"{pad}}}\n{pad}free({part});", line)


class ColumnRider:
    """A column reduction riding a row pass: y[c] = f(red[r](body)) where r is the pass's shared
    row loop. Each thread adds its rows into its own partial row (allocated before the parallel
    region, one row per thread); after the row loop the partial rows are combined in thread
    order (deterministic) and f is applied."""

    def __init__(self, op: Op, lay, stmt, ctx: ExprContext, threads: int) -> None:
        self.op, self.lay, self.stmt, self.ctx, self.threads = op, lay, stmt, ctx, threads
        self.red = column_reduce(stmt)
        k = kind(self.red, ctx)
        self.body_kind = "f" if k == "f" else "i"
        self.ctype = ctx.ctype(self.body_kind)
        self.col = stmt.indices[0]
        self.extent = lay.shapes[stmt.target][0]
        self.part, self.vacc = ctx.fresh(f"part_{stmt.target}"), ctx.fresh(f"rows_{stmt.target}")

    def allocate(self, w: CodeWriter, pad: str) -> None:
        """Before the parallel region: one partial row per thread."""
        w.emit(f"{pad}{self.ctype} *restrict {self.part} = "
               f"malloc(sizeof({self.ctype}) * {self.threads * self.extent});", self.stmt.line)

    def start(self, w: CodeWriter, pad: str) -> None:
        """Inside the region, before the row loop: this thread's partial row, at the identity."""
        inits, _, _ = REDUCE_C[self.red.op]
        c = index_id(self.col)
        w.emit(f"{pad}{self.ctype} *restrict {self.vacc} = {self.part} + "
               f"(int64_t)omp_get_thread_num() * {self.extent};\n"
               f"{pad}#pragma omp simd\n{pad}for (int64_t {c} = 0; {c} < {self.extent}; ++{c}) "
               f"{self.vacc}[{c}] = {inits[self.body_kind]};", self.stmt.line)

    def _update(self) -> str:
        """C text adding the body at (row o0, column c) into this thread's partial row."""
        _, update, _ = REDUCE_C[self.red.op]
        body = render(self.red.body, self.ctx)
        if self.body_kind == "f" and kind(self.red.body, self.ctx) != "f":
            body = f"(({self.ctx.real})({body}))"
        return update.format(a=f"{self.vacc}[{index_id(self.col)}]", v=body)

    def row(self, w: CodeWriter, pad: str) -> None:
        """Inside the row loop (o0 is the row): add this row's column values."""
        c, line = index_id(self.col), self.stmt.line
        w.emit(f"{pad}{{ /* line {line}: {self.stmt.target}[{self.col}], this row's share */\n"
               f"{pad}    const int64_t {index_id(self.red.indices[0])} = o0;\n"
               f"{pad}    #pragma omp simd\n"
               f"{pad}    for (int64_t {c} = 0; {c} < {self.extent}; ++{c})\n"
               f"{pad}        {self._update()}\n{pad}}}", line)

    def share(self, w: CodeWriter, pad: str, loop_index: str) -> None:
        """Inside another statement's loop over the same columns (`loop_index`, its C name),
        its row index declared before that loop: add this row's value at that column."""
        c, line = index_id(self.col), self.stmt.line
        column = "" if c == loop_index else f" const int64_t {c} = {loop_index};"
        w.emit(f"{pad}{{ /* line {line}: {self.stmt.target}[{self.col}], this row's share */"
               f"{column}\n{pad}    {self._update()}\n{pad}}}", line)

    def finish(self, w: CodeWriter, pad: str, rows: int, wait: bool = True) -> None:
        """After the row loop's barrier: combine the partial rows and store f(total); without
        `wait`, threads go on past the loop at once (nothing after it in the region reads it)."""
        _, update, _ = REDUCE_C[self.red.op]
        c, line, ctx = index_id(self.col), self.stmt.line, self.ctx
        acc = ctx.fresh("acc")
        ctx.cache[id(self.red)] = f"({acc} / ({ctx.real}){rows})" if self.red.op == "mean" else acc
        value = render(self.stmt.expr, ctx)
        decl = self.op.tensor(self.stmt.target)
        if self.stmt.target in {d.name for d in self.op.outputs} or not decl.dtype.is_float:
            value = store(decl.dtype, value, kind(self.stmt.expr, ctx))
        w.emit(f"{pad}#pragma omp for schedule(static){'' if wait else ' nowait'}\n"
               f"{pad}for (int64_t {c} = 0; {c} < {self.extent}; ++{c}) {{\n"
               f"{pad}    {self.ctype} {acc} = {self.part}[{c}];\n"
               f"{pad}    for (int t = 1; t < omp_get_num_threads(); ++t)\n"
               f"{pad}        {update.format(a=acc, v=f'{self.part}[(int64_t)t * {self.extent} + {c}]')}\n"
               f"{pad}    {self.lay.address(self.stmt.target, [c])} = {value};\n{pad}}}", line)
