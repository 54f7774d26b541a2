"""Map runs of the generic C path: consecutive element-wise statements of a pass that walk the
same inner loop share it (entry points `map_runs` and `emit_map_run`).

An optimizer's update (m, v, then the parameter from both) is three maps over each row. As
three loops, every row streams its inputs three times and the hardware prefetcher restarts
at each one; in one loop each element is read once, its results stay in registers for the
statements after, and every store is one stream. A statement joins the run before it when it
has the run's index names, one loop past the shared ones of the same extent, no reduction or
scan, and reads what the run wrote only at its own element (the value computed in this
iteration).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from uol_core.backends.c.loops.regions import hoist_invariant_reads
from uol_core.backends.c.text.expr import kind, render, store
from uol_core.backends.c.text.names import index_id
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import Access, Op, Reduce, Scan, walk


def map_runs(op: Op, lay, runs: list[list[int]], depth: int, cfg: Mapping,
             excluded: set[int]) -> list[tuple[bool, list[int]]]:
    """`runs` (a pass's statements cut by loops.siblings) with consecutive single-statement map
    runs merged, each as (one loop, statements): True for a merged run of two or more maps.
    Statements in `excluded` (riders, row loops) stay alone, and all do with `fuse=0`."""
    merged: list[tuple[bool, list[int]]] = []
    maps: dict[int, bool] = {}  # statement -> _is_map, rendered once (a run asks of its first often)

    def is_map(j: int) -> bool:
        if j not in maps:
            maps[j] = _is_map(op, lay, j, depth, cfg)
        return maps[j]

    for run in runs:
        i = run[0]
        if cfg.get("fuse", 1) and len(run) == 1 and merged and len(merged[-1][1]) >= 1 \
                and i not in excluded and is_map(i) \
                and (merged[-1][0] or len(merged[-1][1]) == 1) \
                and _joins(op, lay, merged[-1][1], i, depth, is_map, excluded):
            merged[-1] = (True, [*merged[-1][1], i])
        else:
            merged.append((False, list(run)))
    return merged


def _is_map(op: Op, lay, i: int, depth: int, cfg: Mapping) -> bool:
    """An element-wise statement with one loop past the shared ones, rendered without setup
    code before the loop."""
    stmt = op.stmts[i]
    if len(stmt.indices) != depth + 1 or stmt.extents:
        return False
    if any(isinstance(n, (Reduce, Scan)) for n in walk(stmt.expr)):
        return False
    ctx = lay.context(i, cfg)
    render(stmt.expr, ctx)
    return not ctx.pre


def _joins(op: Op, lay, run: list[int], i: int, depth: int, is_map: Callable[[int], bool],
           excluded: set[int]) -> bool:
    first, stmt = op.stmts[run[0]], op.stmts[i]
    if run[0] in excluded or not is_map(run[0]) \
            or stmt.indices != first.indices:
        return False
    sizes = dict(lay.sizes)
    inner = stmt.indices[depth]
    if stmt_extents(op, i).free[inner].evaluate(sizes) != \
            stmt_extents(op, run[0]).free[inner].evaluate(sizes):
        return False
    written = {op.stmts[j].target for j in run}
    return all(tuple(f.pure_symbol for f in a.indices) == stmt.indices
               for a in walk(stmt.expr) if isinstance(a, Access) and a.tensor in written)


def emit_map_run(w: CodeWriter, op: Op, lay, run: list[int], depth: int, pad: str,
                 cfg: Mapping, threads: int | None = None) -> None:
    """The run's statements as one vector loop, each storing its element in turn; with
    `threads`, a pass of its own whose loop the threads split (flat maps, depth 0)."""
    stmts = [op.stmts[i] for i in run]
    first = stmts[0]
    w.emit(f"{pad}{{ /* lines {', '.join(str(s.line) for s in stmts)}: "
           f"{', '.join(s.target for s in stmts)}[{', '.join(first.indices)}] in one loop */",
           first.line)
    inner = pad + "    "
    for p in range(depth):
        w.emit(f"{inner}const int64_t {index_id(first.indices[p])} = o{p};", first.line)
    name = first.indices[depth]
    extent = stmt_extents(op, run[0]).free[name].evaluate(dict(lay.sizes))
    for stmt in stmts:
        hoist_invariant_reads(w, lay, stmt, name, inner)
    vec = int(cfg.get("vec") or 0)
    split = f"parallel for simd num_threads({threads}) schedule(static)" if threads else "simd"
    w.emit(f"{inner}#pragma omp {split}{f' simdlen({vec})' if vec else ''}", first.line)
    w.emit(f"{inner}for (int64_t {index_id(name)} = 0; {index_id(name)} < {extent}; "
           f"++{index_id(name)}) {{", first.line)
    outputs = {d.name for d in op.outputs}
    for i, stmt in zip(run, stmts):
        ctx = lay.context(i, cfg)
        value = render(stmt.expr, ctx)
        decl = op.tensor(stmt.target)
        if stmt.target in outputs or not decl.dtype.is_float:
            value = store(decl.dtype, value, kind(stmt.expr, ctx))
        target = lay.address(stmt.target, [index_id(n) for n in stmt.indices])
        w.emit(f"{inner}    {target} = {value};", stmt.line)
    lay.hoisted = {}
    w.emit(f"{inner}}}", first.line)
    w.emit(f"{pad}}}", first.line)
