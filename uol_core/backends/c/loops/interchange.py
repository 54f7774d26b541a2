"""Loop interchange in the generic C path (entry points `interchangeable` and `interchanged`):
a reduction innermost in a statement's loops, computed instead as a row of accumulators over
the innermost free index, so the vector loop runs along a contiguous axis (y[i, j] =
sum[k](a[i, k] * b[k, j]) adds b's rows into acc[j] rather than reducing k lane by lane)."""

from __future__ import annotations

from uol_core.backends.c.text.expr import REDUCE_C, ExprContext, kind, render
from uol_core.backends.c.text.names import index_id
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.odl.ir import Access, Reduce, walk

MAX_VECTOR_ACC = 16384  # elements of a stack accumulator row (64 KiB of f32)


def interchangeable(reds: list, rest: list[str], free: dict[str, int], scan_index,
                     parallel: bool) -> Reduce | None:
    """The innermost reduction to compute as a vector over the innermost free index, if it pays:
    that index runs with stride 1 along some operand's last (contiguous) axis."""
    if len(reds) != 1 or not rest or rest[-1] == scan_index or (parallel and len(rest) == 1):
        return None
    red, last = reds[0], rest[-1]
    if red.op not in REDUCE_C or any(isinstance(x, Reduce) for x in walk(red.body) if x is not red):
        return None
    if free[last] > MAX_VECTOR_ACC:
        return None
    for node in walk(red.body):
        if isinstance(node, Access) and node.indices:
            form = node.indices[-1]
            if dict(form.terms).get(last) == 1:  # contiguous in `last` (a window w + s too)
                return red
    return None


def interchanged(w: CodeWriter, ctx: ExprContext, red: Reduce, last: str, extent: int, pad: str,
                  line: int) -> None:
    """Reduction loops outside, the free index inside (vectorised): acc[last] += body."""
    k = kind(red, ctx)
    body_kind = "f" if k == "f" else "i"
    vacc = ctx.fresh("vacc")
    inits, update, _ = REDUCE_C[red.op]
    i = index_id(last)
    w.emit(f"{pad}{ctx.ctype(body_kind)} {vacc}[{extent}];", line)
    w.emit(f"{pad}#pragma omp simd\n{pad}for (int64_t {i} = 0; {i} < {extent}; ++{i}) "
           f"{vacc}[{i}] = {inits[body_kind]};", line)
    inner = pad
    for name in red.indices:
        ident = index_id(name)
        w.emit(f"{inner}for (int64_t {ident} = 0; {ident} < {ctx.reductions[red][name]}; ++{ident}) {{",
               line)
        inner += "    "
    value = render(red.body, ctx)
    if body_kind == "f" and kind(red.body, ctx) != "f":
        value = f"(({ctx.real})({value}))"
    w.emit(f"{inner}#pragma omp simd\n{inner}for (int64_t {i} = 0; {i} < {extent}; ++{i})", line)
    w.emit(f"{inner}    {update.format(a=f'{vacc}[{i}]', v=value)}", line)
    for _ in red.indices:
        inner = inner[:-4]
        w.emit(f"{inner}}}", line)
    ctx.pre.clear()
    count = 1
    for name in red.indices:
        count *= ctx.reductions[red][name]
    ctx.cache[id(red)] = f"({vacc}[{i}] / ({ctx.real}){count})" if red.op == "mean" else f"{vacc}[{i}]"
