"""What the generic C emitter adds inside a parallel pass: restrict copies of the shared
tensors, reads hoisted out of vector loops, and column reductions riding the row loop."""

from __future__ import annotations

from collections.abc import Mapping

from uol_core.acg.fusion import FusionGroup
from uol_core.backends.c.loops.columns import ColumnRider
from uol_core.backends.c.text.names import invariant_id, region_id, tensor_id
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.odl.ir import Access, Op, Reduce, Scan, children, walk


def region_pointers(w: CodeWriter, op: Op, lay, g: FusionGroup, pad: str, line: int) -> None:
    """Restrict copies of the shared tensors a parallel pass touches. gcc drops `restrict` from
    variables an OpenMP region captures, so without the copies a store to one output may alias
    a row statistic read by the same loop (an output like mu) and the loop stays scalar."""
    used: set[str] = set()
    for i in g.stmts:
        used.add(op.stmts[i].target)
        used.update(n.tensor for n in walk(op.stmts[i].expr) if isinstance(n, Access))
    inputs = {d.name for d in op.inputs}
    written_over = {source: out for out, source in op.aliases.items()}
    for name in sorted(used - set(g.private) - set(written_over)):
        if name not in lay.shapes:
            continue
        qual = "const " if name in inputs else ""
        local = region_id(name)
        w.emit(f"{pad}{qual}{lay.elem_type(name)} *restrict {local} = {tensor_id(name)};", line)
        lay.region_names[name] = local
    for name in sorted(used & set(written_over)):
        # read through the copy of the output written over it, when this pass writes that
        # output: one restrict pointer per object (see text/frame.py, _aliased_inputs)
        out = written_over[name]
        base, qual = (region_id(out), "") if out in used else (tensor_id(name), "restrict ")
        w.emit(f"{pad}const {lay.elem_type(name)} *{qual}{region_id(name)} = {base};", line)
        lay.region_names[name] = region_id(name)


def hoist_invariant_reads(w: CodeWriter, lay, stmt, index: str, pad: str, expr=None) -> None:
    """Read the elements the vector loop over `index` does not move along (a row's mean, a
    scale) once, before the loop: gcc keeps such loads inside and then declines to vectorise
    when the tensor is also an output of the kernel. `expr`: the part of `stmt` the loop
    computes (a column rider's reduction body), by default its whole expression."""
    seen: list = []
    first = len(lay.hoisted)  # locals already hoisted for the same loop keep their names

    def visit(e) -> None:
        if isinstance(e, (Reduce, Scan)):
            return  # reductions run their own loops
        if (isinstance(e, Access) and e.pad is None and e.tensor != stmt.target and e not in seen
                and all(index not in f.symbols for f in e.indices)):
            seen.append(e)
        for c in children(e):
            visit(c)

    visit(stmt.expr if expr is None else expr)
    for k, a in enumerate(seen, first):
        text = lay.access(a)
        local = invariant_id(a.tensor, k)
        w.emit(f"{pad}const {lay.elem_type(a.tensor)} {local} = {text};", stmt.line)
        lay.hoisted[text] = local


def column_rider(op: Op, lay, i: int, cfg: Mapping) -> ColumnRider:
    """The emitter of statement i riding a row pass (its own expression context)."""
    return ColumnRider(op, lay, op.stmts[i], lay.context(i, cfg), int(cfg.get("threads") or 1))
