"""Generic C path: any checked ODL op as loop nests, correct for every shape (the templates' fallback).

Each fusion group (acg/fusion.py) is one OpenMP-parallel loop nest over its shared outer
loops; inside, each statement loops over its remaining free indices (a scan index last),
reductions are accumulator loops, intermediates live in scratch buffers (whole tensors) or in
per-thread slices (private ones). Innermost loops carry `omp simd` so gcc vectorises them.
A column reduction (y[c] = sum[r](g[r, c]), fusion.column_reduce) runs its rows outside and
its columns contiguous inside, over column blocks per thread or row blocks with partial rows.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from uol_core.acg.config import lanes, reduction_chains, target_isas
from uol_core.acg.fusion import (
    FusionGroup,
    FusionPlan,
    column_reduce,
    plan_fusion,
    short_inner_axis,
)
from uol_core.backends.base import KernelSource
from uol_core.backends.c.loops.columns import column_reduction
from uol_core.backends.c.loops.interchange import interchangeable, interchanged
from uol_core.backends.c.loops.maprun import emit_map_run, map_runs
from uol_core.backends.c.loops.regions import column_rider, hoist_invariant_reads, region_pointers
from uol_core.backends.c.loops.rowloop import RowLoop, plan_row_loops, stream_prelude
from uol_core.backends.c.loops.siblings import emit_siblings, sibling_runs
from uol_core.backends.c.loops.stencil import (
    emit_halo_copies,
    halo_address,
    halo_margins,
    halo_name,
)
from uol_core.backends.c.platforms import platform
from uol_core.backends.c.text.expr import (
    PRELUDE,
    STORAGE,
    ExprContext,
    compute_type,
    free_names,
    kind,
    outer_reduces,
    render,
    render_affine_c,
    split_parts,
    store,
)
from uol_core.backends.c.text.frame import includes, open_entry
from uol_core.backends.c.text.names import index_id, size_id, tensor_id
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import Access, DType, Op, Scan, walk
from uol_core.odl.shapes import shape_of

GENERATOR = "uol-c-generic-1"
# "isa" (the build flags the loops are compiled with) defaults to the target's best ISA
DEFAULTS = {"threads": 0, "fuse": 1, "simd": 1, "chunk": 0, "vec": 0}


class _Layout:
    """Where every tensor lives and how an access addresses it (sizes are compile-time numbers)."""

    def __init__(self, op: Op, sizes: Mapping[str, int], plan: FusionPlan, real: str) -> None:
        self.op, self.sizes, self.real = op, dict(sizes), real
        self.shapes = {d.name: shape_of(op, d.name, sizes) for d in op.inputs + op.outputs + op.locals}
        self.private: dict[str, int] = {}  # private intermediate -> depth of its group
        for g in plan.groups:
            for name in g.private:
                self.private[name] = g.depth
        self.dims = set(op.dims)
        self.halos = halo_margins(op, sizes)
        self.region_names: dict[str, str] = {}  # tensor -> its restrict copy inside a parallel region
        self.hoisted: dict[str, str] = {}  # rendered access -> const local read before the loop
        self.rows: dict = {}  # row statement -> its RowShare (loops.rowloop), set by emit
        # partial sums per vectorised reduction and the vector's lanes (set by emit from the
        # target; one sum where no target says how long an add takes)
        self.chains, self.lanes = 1, 1

    def context(self, i: int, cfg: Mapping) -> ExprContext:
        """A fresh expression context for statement i (its reductions' extents bound)."""
        reductions = {r: {n: f.evaluate(dict(self.sizes)) for n, f in m.items()}
                      for r, m in stmt_extents(self.op, i).reductions.items()}
        return ExprContext(self.real, {n: self.value_dtype(n) for n in self.shapes}, self.access,
                           self.bounds, reductions, self.dims, simd=bool(cfg.get("simd", 1)),
                           chains=self.chains, lanes=self.lanes)

    def elem_type(self, name: str) -> str:
        decl = self.op.tensor(name)
        is_local = name not in {d.name for d in self.op.inputs + self.op.outputs}
        return self.real if is_local and decl.dtype.is_float else STORAGE[decl.dtype]

    def value_dtype(self, name: str) -> DType:
        """The dtype as stored: float intermediates live in the compute type."""
        decl = self.op.tensor(name)
        is_local = name not in {d.name for d in self.op.inputs + self.op.outputs}
        if is_local and decl.dtype.is_float:
            return DType.f64 if self.real == "double" else DType.f32
        return decl.dtype

    def kept_axes(self, name: str) -> range:
        return range(self.private.get(name, 0), len(self.shapes[name]))

    def count(self, name: str) -> int:
        return math.prod(self.shapes[name][p] for p in self.kept_axes(name))

    def address(self, tensor: str, forms) -> str:
        shape, terms, stride = self.shapes[tensor], [], 1
        for p in reversed(self.kept_axes(tensor)):
            text = forms[p]
            terms.append(text if stride == 1 else f"{text} * {stride}")
            stride *= shape[p]
        name = self.region_names.get(tensor, tensor_id(tensor))
        return f"{name}[{' + '.join(reversed(terms)) or '0'}]"

    def access(self, a: Access) -> str:
        key = (a.tensor, float(a.pad)) if a.pad is not None else None
        if key in self.halos:
            return halo_address(a, key, list(self.halos), list(self.shapes[a.tensor]),
                                self.halos[key], lambda f: render_affine_c(f, self.dims))
        text = self.address(a.tensor, [render_affine_c(f, self.dims) for f in a.indices])
        return self.hoisted.get(text, text)

    def bounds(self, a: Access) -> str:
        if (a.tensor, float(a.pad)) in self.halos:
            return "1"  # the halo buffer holds the pad value outside the tensor
        parts = []
        for form, extent in zip(a.indices, self.shapes[a.tensor]):
            text = render_affine_c(form, self.dims)
            parts.append(f"{text} >= 0 && {text} < {extent}")
        return "(" + " && ".join(parts or ["1"]) + ")"


def emit(op: Op, sizes: Mapping[str, int], target=None, config: Mapping | None = None) -> KernelSource:
    """The generic C kernel of `op` at concrete `sizes` (entry `void f(void **args, const int64_t *)`)."""
    best_isa = target_isas(target)[0] if target is not None else "vecext"
    cfg = {**DEFAULTS, "isa": best_isa, **(config or {})}
    plan = plan_fusion(op, sizes, enabled=bool(cfg["fuse"]))
    real = compute_type(op)
    lay = _Layout(op, sizes, plan, real)
    threads = int(cfg["threads"]) or int(getattr(target, "cores", 0) or os.cpu_count() or 1)
    cfg["threads"] = threads
    lay.rows = plan_row_loops(op, lay.shapes, plan, real, cfg, target)
    if target is not None and real == "float":
        lay.chains, lay.lanes = reduction_chains(target), lanes(best_isa, target)
    streams = any(share.streamed for share in lay.rows.values())
    w = CodeWriter(default_line=op.line)
    entry = f"uol_{op.name}"
    args = [d.name for d in op.inputs] + [d.name for d in op.outputs]
    w.emit(f"/* {op.name}: generic loop-nest kernel generated by UOL ({GENERATOR}).\n"
           f"   sizes: {', '.join(f'{k}={v}' for k, v in sizes.items())}; compute type {real}\n"
           + "\n".join(f"   {line}" for line in plan.explain(op).splitlines())
           + "".join(f"\n   row loop of {share.describe(op, i)}" for i, share in lay.rows.items())
           + _split_note(op, sizes, lay, target) + " */")
    w.emit(includes("stdint.h", "stdlib.h", "math.h", "omp.h", *(("string.h",) if op.aliases else ())))
    w.emit(PRELUDE)
    if streams:
        w.emit(stream_prelude(cfg["isa"], target))
    for name in op.dims:
        w.emit(f"#define {size_id(name)} {int(sizes[name])}")
    open_entry(w, entry, args, len(op.inputs), blank_before=True, elem_type=lay.elem_type,
               aliases=op.aliases, counts=lay.count)
    scratch = [d.name for d in op.locals if d.name not in lay.private]
    for name in scratch:
        w.emit(f"    {lay.elem_type(name)} *restrict {tensor_id(name)} = "
               f"malloc(sizeof({lay.elem_type(name)}) * {lay.count(name)});",
               op.tensor(name).line)
    emit_halo_copies(w, op, lay.shapes, lay.elem_type, lay.halos, threads)
    for g in plan.groups:
        _group(w, op, lay, g, cfg, threads)
    for name in scratch:
        w.emit(f"    free({tensor_id(name)});")
    for key in lay.halos:
        w.emit(f"    free({halo_name(key, list(lay.halos))});")
    w.emit("}")
    meta = {"args": args, "outputs": [d.name for d in op.outputs], "threads": threads,
            "generator": GENERATOR, "fusion": plan.explain(op), "groups": len(plan.groups),
            "reduction_length": _reduction_length(op, sizes)}
    return w.source(entry, op.name, {**cfg, "threads": threads}, meta)


def _split_note(op: Op, sizes: Mapping[str, int], lay: _Layout, target) -> str:
    """The header line saying which reductions keep partial sums and the facts behind it."""
    longest = max((list(red.values())[-1].evaluate(dict(sizes))
                   for i in range(len(op.stmts))
                   for red in stmt_extents(op, i).reductions.values()), default=0)
    if split_parts(longest, lay.chains, lay.lanes) < 2:
        return ""
    return (f"\n   reductions keep up to {lay.chains} partial sums, each over a stretch of at least "
            f"as many whole {lay.lanes}-lane vectors (HFL {target.name}: fma_latency_cycles "
            f"{target.fma_latency_cycles} x fma_units {target.fma_units}; one sum would wait "
            "an add's latency per vector)")


def _reduction_length(op: Op, sizes: Mapping[str, int]) -> int:
    """Longest chain of summed terms behind any output element (sets the verify tolerance)."""
    longest = 1
    for i in range(len(op.stmts)):
        for red in stmt_extents(op, i).reductions.values():
            longest = max(longest, math.prod(f.evaluate(dict(sizes)) for f in red.values()))
        for node in walk(op.stmts[i].expr):
            if isinstance(node, Scan):
                pos = op.stmts[i].indices.index(node.index)
                longest = max(longest, shape_of(op, op.stmts[i].target, sizes)[pos])
    return longest


def _group(w: CodeWriter, op: Op, lay: _Layout, g: FusionGroup, cfg: Mapping, threads: int) -> None:
    """One pass: shared loops (OpenMP over them), then each statement's own loop nest."""
    line = op.stmts[g.stmts[0]].line
    pad = "    "
    if g.depth:
        riders = {i: column_rider(op, lay, i, cfg) for i in g.riders}
        for rider in riders.values():
            rider.allocate(w, pad)
        w.emit(f"{pad}#pragma omp parallel num_threads({threads})\n{pad}{{", line)
        for name in g.private:
            w.emit(f"{pad}    {lay.elem_type(name)} *restrict {tensor_id(name)} = "
                   f"malloc(sizeof({lay.elem_type(name)}) * {lay.count(name)});", line)
        region_pointers(w, op, lay, g, pad + "    ", line)
        for rider in riders.values():
            rider.start(w, pad + "    ")
        chunk = int(cfg.get("chunk") or 0)
        sched = f"schedule(static, {chunk})" if chunk else "schedule(static)"
        collapse = f" collapse({g.depth})" if g.depth > 1 else ""
        w.emit(f"{pad}    #pragma omp for{collapse} {sched}", line)
        for p, extent in enumerate(g.extents):
            w.emit(f"{pad}    {'    ' * p}for (int64_t o{p} = 0; o{p} < {extent}; ++o{p})", line)
        w.emit(f"{pad}    {{", line)
        _runs(w, op, lay, g, riders, cfg, pad + "        ")
        w.emit(f"{pad}    }}", line)
        if any(lay.rows[i].streamed for i in g.stmts if i in lay.rows):
            # each thread orders its own weakly ordered stores before the region's barrier
            w.emit(f"{pad}    {platform(cfg['isa']).fence}", line)
        # Each rider's combine loop writes only its own output, so it need not wait for the
        # others (one barrier instead of one per rider), unless a later rider's value reads it.
        order = list(riders)
        for k, i in enumerate(order):
            later = {n.tensor for j in order[k + 1:] for n in walk(op.stmts[j].expr)
                     if isinstance(n, Access)}
            riders[i].finish(w, pad + "    ", g.extents[0],
                             wait=op.stmts[i].target in later)
        for name in g.private:
            w.emit(f"{pad}    free({tensor_id(name)});", line)
        w.emit(f"{pad}}}", line)
        lay.region_names = {}
        for rider in riders.values():
            w.emit(f"{pad}free({rider.part});", line)
    elif len(g.stmts) > 1:  # flat maps fused by acg.fusion: one parallel vector loop
        emit_map_run(w, op, lay, g.stmts, 0, pad, cfg, threads=w_threads(cfg))
    else:
        _statement(w, op, lay, g.stmts[0], 0, pad, cfg, top=True)


def _runs(w: CodeWriter, op: Op, lay: _Layout, g: FusionGroup, riders: dict, cfg: Mapping,
          pad: str) -> None:
    """The statements inside a pass's shared loops: sibling reductions and map runs share
    their loops, riders add their row, every other statement gets its own loop nest."""
    shared = {j for i in g.stmts if i in lay.rows for j in lay.rows[i].riders}
    runs = sibling_runs(op, lay, g.stmts, g.depth, cfg, set(riders))
    for one_loop, run in map_runs(op, lay, runs, g.depth, cfg, {*riders, *lay.rows, *shared}):
        if run[0] in shared:
            continue  # its share is added inside a row statement's loop
        if run[0] in riders:
            riders[run[0]].row(w, pad)
        elif one_loop:
            emit_map_run(w, op, lay, run, g.depth, pad, cfg)
        elif len(run) > 1:
            emit_siblings(w, op, lay, run, g.depth, pad, cfg)
        else:
            row = RowLoop(lay.rows[run[0]], riders) if run[0] in lay.rows else None
            _statement(w, op, lay, run[0], g.depth, pad, cfg, row=row)


def _statement(w: CodeWriter, op: Op, lay: _Layout, i: int, depth: int, pad: str, cfg: Mapping,
               top: bool = False, row: RowLoop | None = None) -> None:
    """Loops of statement i past the shared ones, its reductions, and the store; `row`, what
    its column loop carries besides (riders' shares, a streamed row's stage)."""
    stmt = op.stmts[i]
    ext = stmt_extents(op, i)
    sizes = lay.sizes
    free = {n: f.evaluate(dict(sizes)) for n, f in ext.free.items()}
    scans = [n for n in walk(stmt.expr) if isinstance(n, Scan)]
    ctx = lay.context(i, cfg)
    w.emit(f"{pad}{{ /* line {stmt.line}: {stmt.target}[{', '.join(stmt.indices)}] */", stmt.line)
    inner = pad + "    "
    for p in range(depth):
        w.emit(f"{inner}const int64_t {index_id(stmt.indices[p])} = o{p};", stmt.line)
    row = row or RowLoop(None, {})
    row.open(w, inner, stmt.line)
    rest = list(stmt.indices[depth:])
    scan_index = scans[0].index if scans else None
    if scan_index in rest:  # the running state needs the scan index innermost
        rest.remove(scan_index)
        rest.append(scan_index)
    parallel = bool(top and rest and rest[0] != scan_index and free[rest[0]] > 1)
    red = column_reduce(stmt) if top and len(rest) == 1 else None
    if red is not None and free[rest[0]] > 0 and all(n > 0 for n in ctx.reductions[red].values()):
        column_reduction(w, op, lay, stmt, ctx, red, rest[0], free[rest[0]], inner,
                          w_threads(cfg))
        w.emit(f"{pad}}}", stmt.line)
        return
    levels = _reduction_levels(stmt.expr, rest)
    if len(rest) >= 2 and scan_index not in rest[-2:] and levels.get(len(rest)) \
            and short_inner_axis(op, i, sizes):
        # accumulate along the longer of the two inner axes (see acg.fusion short_inner_axis)
        rest[-2], rest[-1] = rest[-1], rest[-2]
        levels = _reduction_levels(stmt.expr, rest)
    innermost_reduces = bool(levels.get(len(rest))) or (len(rest) == 0 and bool(levels))
    swap = interchangeable(levels.get(len(rest), []), rest, free, scan_index, parallel)
    for n, name in enumerate(rest):
        inner = _hoisted(w, ctx, levels.get(n, []), inner, stmt.line)
        if swap is not None and n == len(rest) - 1:
            interchanged(w, ctx, swap, name, free[name], inner, stmt.line)
            innermost_reduces = False
        if name == scan_index:
            _start_scans(w, ctx, scans, inner, stmt.line)
        simd = n == len(rest) - 1 and name != scan_index and ctx.simd and not innermost_reduces
        if simd and swap is None:
            hoist_invariant_reads(w, lay, stmt, name, inner)
        row.hoist(w, lay, stmt.indices[:depth], inner, reads=simd)
        if parallel and n == 0:
            w.emit(f"{inner}#pragma omp parallel for{' simd' if simd else ''} "
                   f"num_threads({w_threads(cfg)}) schedule(static)", stmt.line)
        elif simd:
            vec = int(cfg.get("vec") or 0)
            w.emit(f"{inner}#pragma omp simd{f' simdlen({vec})' if vec else ''}", stmt.line)
        w.emit(f"{inner}for (int64_t {index_id(name)} = 0; {index_id(name)} < {free[name]}; "
               f"++{index_id(name)}) {{", stmt.line)
        inner += "    "
    top_reduce = top and not rest
    value = render(stmt.expr, ctx)
    if top_reduce:
        # A whole-tensor reduction (a scalar result): split the outermost accumulator loop.
        _parallel_first_reduce(ctx.pre, w_threads(cfg))
    inner = _emit_nested(w, ctx.pre, inner, stmt.line)
    forms = [index_id(n) for n in stmt.indices]
    target = lay.address(stmt.target, forms)
    decl = op.tensor(stmt.target)
    is_output = stmt.target in {d.name for d in op.outputs}
    if is_output or not decl.dtype.is_float:  # float intermediates stay in the compute type
        value = store(decl.dtype, value, kind(stmt.expr, ctx))
    w.emit(f"{inner}{row.store_target(target)} = {value};", stmt.line)
    row.inside(w, inner)
    lay.hoisted = {}
    for _ in rest:  # close the statement's own loops
        inner = inner[:-4]
        w.emit(f"{inner}}}", stmt.line)
    row.close(w, inner, lambda: lay.address(stmt.target, [*forms[:-1], "0"]), stmt.line)
    w.emit(f"{pad}}}", stmt.line)


def _reduction_levels(expr, rest: list[str]) -> dict[int, list]:
    """Loop-invariant code motion: each outer reduction keyed by the loop depth it is computed at,
    just inside the loops it depends on (0: before all of them)."""
    levels: dict[int, list] = {}
    for red in outer_reduces(expr):
        deps = free_names(red.body, frozenset(red.indices)) & set(rest)
        level = max((rest.index(n) + 1 for n in deps), default=0)
        levels.setdefault(level, []).append(red)
    return levels


def _start_scans(w: CodeWriter, ctx: ExprContext, scans: list[Scan], pad: str, line: int) -> None:
    """Declare each scan's running value at its identity, just outside the scan index's loop."""
    for s in scans:
        ctx.scans[id(s)] = ctx.fresh("run")
        init = {"cumsum": "0", "cumprod": "1", "cummax": "-INFINITY"}[s.op]
        w.emit(f"{pad}{ctx.ctype(kind(s, ctx))} {ctx.scans[id(s)]} = {init};", line)


def _hoisted(w: CodeWriter, ctx: ExprContext, reds: list, pad: str, line: int) -> str:
    """Emit the accumulator loops of `reds` here (their value is cached for the expression)."""
    for red in reds:
        render(red, ctx)
    pad = _emit_nested(w, ctx.pre, pad, line)
    ctx.pre.clear()
    return pad


def _emit_nested(w: CodeWriter, lines: list[str], pad: str, line: int) -> str:
    """Emit rendered lines, indenting inside each `{` and back at each `}`; the indent left open."""
    for text in lines:
        if text == "}":
            pad = pad[:-4]
        w.emit(pad + text, line)
        if text.endswith("{"):
            pad += "    "
    return pad


def w_threads(cfg: Mapping) -> int:
    """Threads of a top-level parallel loop (the config's, resolved in emit)."""
    return int(cfg.get("threads") or 1)


def _parallel_first_reduce(pre: list[str], threads: int) -> None:
    """Turn the first accumulator loop into an OpenMP parallel reduction (rank-0 results)."""
    for n, text in enumerate(pre):
        if text.startswith("for "):
            head = pre[n - 1] if n else ""
            if head.startswith("#pragma omp simd reduction("):
                clause = head.split("simd ", 1)[1]
                pre[n - 1] = f"#pragma omp parallel for simd {clause} num_threads({threads})"
            else:
                acc = pre[n - 1].split()[1] if n else ""
                op = _omp_op_of(pre, acc)
                if op:
                    pre.insert(n, f"#pragma omp parallel for reduction({op}:{acc}) "
                                  f"num_threads({threads})")
            return


def _omp_op_of(pre: list[str], acc: str) -> str | None:
    for text in pre:
        if text.startswith(f"{acc} += "):
            return "+"
        if text.startswith(f"{acc} *= "):
            return "*"
        if text.startswith(f"{acc} = ") and " > " in text:
            return "max"
        if text.startswith(f"{acc} = ") and " < " in text:
            return "min"
    return None
